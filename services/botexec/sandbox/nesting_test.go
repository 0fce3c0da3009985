package sandbox

import (
	_ "embed"
	"strings"
	"testing"
)

func TestCheckNesting(t *testing.T) {
	deep := func(open, close string, n int) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	cases := []struct {
		name string
		code string
		ok   bool
	}{
		{"ordinary", "exports.handler = async (m, e) => { if (e.input) { return [e.input, {a: (1 + 2)}]; } };", true},
		{"at the limit", deep("(", ")", MaxNesting), true},
		{"parentheses", deep("(", ")", MaxNesting+1), false},
		{"arrays", deep("[", "]", 100_000), false},
		{"objects", strings.Repeat("{a:", 5000) + "1" + strings.Repeat("}", 5000), false},
		{"mixed", deep("([{", "}])", 400), false},
		{"in a string", "const s = '" + strings.Repeat("(", 5000) + "';", true},
		{"in a double-quoted string", `const s = "` + strings.Repeat("[", 5000) + `\"";`, true},
		{"in a line comment", "// " + strings.Repeat("{", 5000) + "\nconst a = 1;", true},
		{"in a block comment", "/* " + strings.Repeat("(", 5000) + " */ const a = 1;", true},
		{"in a template", "const s = `" + strings.Repeat("(", 5000) + "`;", true},
		{"in a template expression", "const s = `a${ (1) }b" + strings.Repeat("[", 5000) + "`;", true},
		{"deep inside a template expression", "const s = `${" + deep("(", ")", MaxNesting+1) + "}`;", false},
		{"in a regexp", "const r = /[" + strings.Repeat("(", 5000) + "]/;", true},
		{"division is not a regexp", "const a = (4) / 2 / (1);", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNesting(tc.code, "t.js")
			if (err == nil) != tc.ok {
				t.Fatalf("ok %v, error %v", tc.ok, err)
			}
		})
	}
	// The runtime's own JavaScript passes.
	if err := CheckNesting(preludeSource, "prelude.js"); err != nil {
		t.Fatal(err)
	}
	err := CheckNesting("const a = 1;\n"+deep("(", ")", 2000), "deep.js")
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error %v does not name line 2", err)
	}
}
