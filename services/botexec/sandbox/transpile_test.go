package sandbox

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// The filename's extension chooses the language: TypeScript syntax is
// accepted only in .ts .mts .cts .tsx (in any case), JSX only in .jsx .tsx.
func TestTranspileLoaders(t *testing.T) {
	const ts = "const n: number = 1; exports.handler = async () => n;"
	const jsx = "const h = (...a) => a.length; const React = {createElement: h}; exports.handler = async () => <b x='1'>y</b>;"
	tests := []struct {
		filename      string
		ts, jsx, runs bool
	}{
		{"bot.ts", true, false, true},
		{"bot.mts", true, false, true},
		{"bot.cts", true, false, true},
		{"BOT.TS", true, false, true},
		{"bot.tsx", true, true, true},
		{"bot.jsx", false, true, true},
		{"bot.js", false, false, true},
		{"bot.mjs", false, false, true},
		{"bot", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.filename, func(t *testing.T) {
			_, err := Transpile(ts, tt.filename)
			if (err == nil) != tt.ts {
				t.Errorf("TypeScript accepted %v, want %v (%v)", err == nil, tt.ts, err)
			}
			code, err := Transpile(jsx, tt.filename)
			if (err == nil) != tt.jsx {
				t.Fatalf("JSX accepted %v, want %v (%v)", err == nil, tt.jsx, err)
			}
			if err != nil {
				return
			}
			res := runBot(t, code, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Text != "3" {
				t.Errorf("JSX ran to %q, want 3 (tag, props, child)", res.Text)
			}
		})
	}
}

func TestTranspileErrorTexts(t *testing.T) {
	tests := []struct {
		name     string
		do       func() error
		message  string
		location string
	}{
		{"no filename is index.js", func() error { _, err := Transpile("let = ;", ""); return err },
			`Syntax error at line 1, column 7 of index.js: Unexpected ";"`, "index.js:1:7"},
		{"TypeScript", func() error {
			_, err := Transpile("export async function handler() {\n  const x: number = ;\n}\n", "bot.ts")
			return err
		},
			`Syntax error at line 2, column 21 of bot.ts: Unexpected ";"`, "bot.ts:2:21"},
		{"nesting is refused before parsing", func() error {
			_, err := Transpile("const a = 1;\nconst b = "+strings.Repeat("[", MaxNesting+1)+strings.Repeat("]", MaxNesting+1)+";", "deep.ts")
			return err
		}, "Syntax error at line 2, column 1 of deep.ts: brackets nest more than 1000 levels deep", "deep.ts:2:1"},
		{"a redeclaration on the first line", func() error { _, err := Compile("bot.js", "let a; let a;"); return err },
			"Syntax error at line 1, column 12 of bot.js: Identifier 'a' has already been declared", "bot.js:1:12"},
		{"a redeclaration on a later line", func() error { _, err := Compile("bot.js", "let a;\n  let a;"); return err },
			"Syntax error at line 2, column 7 of bot.js: Identifier 'a' has already been declared", "bot.js:2:7"},
		{"compile without a name", func() error { _, err := Compile("", "exports.handler = ;"); return err },
			"Syntax error at line 1, column 19 of index.js: Unexpected token ;", "index.js:1:19"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("err = %v, want a 400 *fhir.Error", err)
			}
			if fe.Message() != tt.message {
				t.Errorf("message %q\nwant    %q", fe.Message(), tt.message)
			}
			if ex := fe.Outcome.Issue[0].Expression; len(ex) != 1 || ex[0] != tt.location {
				t.Errorf("expression %v, want [%s]", ex, tt.location)
			}
		})
	}
}

// Compile wraps source in a CommonJS function without checking the seam, so
// source that closes the wrapper early compiles; running it is the bot's
// failure, not a fault of the runtime.
func TestCodeClosingItsWrapper(t *testing.T) {
	tests := []struct{ name, code, want string }{
		{"a value that is not a function", "}); 1; ({", "Bot code is not a CommonJS module: it closes its module wrapper"},
		{"another function", "}); (function () {", "Bot code does not export a handler function (exports.handler)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, tt.code, Event{}, nil, Limits{})
			if res.Err == nil || res.Err.Message != tt.want {
				t.Errorf("err = %+v, want %q", res.Err, tt.want)
			}
		})
	}
	if _, err := Transpile("}); 1; ({", "bot.js"); err == nil {
		t.Error("Transpile accepts it")
	}
}

func TestCheckNestingLexing(t *testing.T) {
	over := strings.Repeat("(", MaxNesting+1)
	cases := []struct {
		name string
		code string
		line int // 0: accepted
	}{
		{"escaped quote in a string", `const s = 'it\'s ` + over + `';`, 0},
		{"escaped backquote in a template", "const s = `\\`" + over + "`;", 0},
		{"after a template expression", "const s = `${a}" + over + "`;", 0},
		{"two template expressions", "const s = `${a}${b}" + over + "`;", 0},
		{"a string holding } in a template expression", "const s = `${'}'}" + over + "`;", 0},
		{"a template in a template", "const s = `${`" + over + "`}`;", 0},
		{"a regular expression with / in a class", "const r = /[/" + over + "]/;", 0},
		{"an escaped / in a regular expression", `const r = /\/` + over + `/;`, 0},
		{"deep after a template expression closes", "const s = `${a}`;\n" + over, 2},
		{"lines counted in block comments", "/*\n\n*/\n" + over, 4},
		{"lines counted in templates", "const s = `\n\n`;\n" + over, 4},
		{"lines counted after a line comment", "// a\n// b\n" + over, 3},
		{"lines counted in a string with a newline", "const s = 'a\nb';\n" + over, 3},
		{"closers do not go below zero", strings.Repeat(")", 5000) + strings.Repeat("(", MaxNesting), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNesting(tc.code, "t.js")
			if tc.line == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *fhir.Error
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a refusal at line %d", err, tc.line)
			}
			if want := "t.js:" + strconv.Itoa(tc.line) + ":1"; fe.Outcome.Issue[0].Expression[0] != want {
				t.Errorf("at %v, want %s", fe.Outcome.Issue[0].Expression, want)
			}
		})
	}
}

// Source cut off anywhere is left to the parser to refuse: the nesting check
// neither panics nor refuses it.
func TestCheckNestingTruncated(t *testing.T) {
	for _, code := range []string{"'abc", "'a\\", "\"a", "`abc", "`a\\", "`${", "`${a}", "`${a}b", "/* abc", "/* a *", "// abc", "a = /[abc", "a = /a\\", "(", "/"} {
		t.Run(code, func(t *testing.T) {
			if err := CheckNesting(code, "t.js"); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}
