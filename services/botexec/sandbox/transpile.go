package sandbox

import (
	"fmt"
	"path"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/evanw/esbuild/pkg/api"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// unsupportedByGoja lists the syntax esbuild must lower for goja: the rest of
// ES2022 (classes with private members, optional chaining, async/await, ...)
// goja runs natively, and lowering it would only make bots slower.
var unsupportedByGoja = map[string]bool{
	"async-generator": false,
	"for-await":       false,
}

// Transpile turns JavaScript or TypeScript (ES modules or CommonJS, chosen by
// the filename's extension: .ts .mts .cts .tsx are TypeScript, anything else
// JavaScript) into CommonJS that goja runs. A syntax error is a 400
// *fhir.Error whose message and expression name the line and column.
func Transpile(code, filename string) (string, error) {
	if filename == "" {
		filename = "index.js"
	}
	if err := CheckNesting(code, filename); err != nil {
		return "", err
	}
	loader := api.LoaderJS
	switch strings.ToLower(path.Ext(filename)) {
	case ".ts", ".mts", ".cts":
		loader = api.LoaderTS
	case ".tsx":
		loader = api.LoaderTSX
	case ".jsx":
		loader = api.LoaderJSX
	}
	res := api.Transform(code, api.TransformOptions{
		Loader:     loader,
		Format:     api.FormatCommonJS,
		Target:     api.ES2022,
		Supported:  unsupportedByGoja,
		Platform:   api.PlatformNeutral,
		Sourcefile: filename,
		Charset:    api.CharsetUTF8,
		LogLevel:   api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		e := res.Errors[0]
		line, col := 0, 0
		if e.Location != nil {
			// esbuild counts columns from 0 in bytes; people count from 1.
			line, col = e.Location.Line, e.Location.Column+1
		}
		return "", syntaxError(filename, line, col, e.Text)
	}
	return string(res.Code), nil
}

func syntaxError(filename string, line, col int, msg string) *fhir.Error {
	where := fmt.Sprintf("%s:%d:%d", filename, line, col)
	return fhir.BadRequest(fmt.Sprintf("Syntax error at line %d, column %d of %s: %s", line, col, filename, msg), where)
}

// Program is a bot's CommonJS code parsed and compiled once; it can be run
// any number of times, concurrently, each time in a fresh runtime.
type Program struct {
	name string
	prog *goja.Program
}

// Name is the file name the program was compiled under.
func (p *Program) Name() string { return p.name }

// modulePrefix opens the CommonJS wrapper. It sits on the code's first line
// so that line numbers in errors and stack traces match the source.
const modulePrefix = "(function (exports, module, require) {"

// Compile parses CommonJS code once into a reusable program (callers cache it
// by Binary version, so that a warm execution never parses source). A syntax
// error is a 400 *fhir.Error with line and column.
func Compile(name, code string) (*Program, error) {
	if name == "" {
		name = "index.js"
	}
	limitRegexps()
	src := modulePrefix + code + "\n})"
	ast, err := parser.ParseFile(nil, name, src, 0)
	if err != nil {
		line, col, msg := 0, 0, err.Error()
		if list, ok := err.(parser.ErrorList); ok && len(list) > 0 {
			line, col, msg = list[0].Position.Line, list[0].Position.Column, list[0].Message
			if line == 1 {
				col = max(col-len(modulePrefix), 1)
			}
		}
		return nil, syntaxError(name, line, col, msg)
	}
	prog, err := goja.CompileAST(ast, false)
	if err != nil {
		line, col, msg := 0, 0, err.Error()
		if cse, ok := err.(*goja.CompilerSyntaxError); ok {
			msg = cse.Message
			if cse.File != nil {
				pos := cse.File.Position(cse.Offset)
				line, col = pos.Line, pos.Column
				if line == 1 {
					col = max(col-len(modulePrefix), 1)
				}
			}
		}
		return nil, syntaxError(name, line, col, msg)
	}
	return &Program{name: name, prog: prog}, nil
}

// MaxNesting bounds how deeply brackets may nest in bot source. Parsers
// recurse once per level: source nested a few million deep overflows the
// goroutine stack, a fatal error no recover() catches. Real code, bundles
// included, stays within a few dozen.
const MaxNesting = 1000

// CheckNesting refuses source whose (), [] and {} nest deeper than
// MaxNesting, with a 400 naming the line. It reads strings, comments,
// template literals and (by the usual heuristic) regular expressions as
// such, so brackets inside them do not count; it runs before any parser,
// in linear time and constant memory.
func CheckNesting(code, filename string) error {
	depth, line := 0, 1
	var templates []int // depth at each open ${ inside a template literal
	var prev byte       // the last significant character outside literals
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case c == '\n':
			line++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '/' && i+1 < len(code) && code[i+1] == '/':
			for i < len(code) && code[i] != '\n' {
				i++
			}
			line++
			continue
		case c == '/' && i+1 < len(code) && code[i+1] == '*':
			for i += 2; i+1 < len(code) && !(code[i] == '*' && code[i+1] == '/'); i++ {
				if code[i] == '\n' {
					line++
				}
			}
			i++
			continue
		case c == '"' || c == '\'':
			i, line = skipQuoted(code, i, c, line)
		case c == '`':
			i, line = skipTemplate(code, i, line)
			if i < len(code) && code[i] == '{' { // a ${ opened
				templates = append(templates, depth)
				depth++
			}
		case c == '/' && regexCanStart(prev):
			i = skipRegexp(code, i)
		case c == '(' || c == '[' || c == '{':
			if depth++; depth > MaxNesting {
				return syntaxError(filename, line, 1, fmt.Sprintf("brackets nest more than %d levels deep", MaxNesting))
			}
		case c == ')' || c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
			if c == '}' && len(templates) > 0 && templates[len(templates)-1] == depth {
				templates = templates[:len(templates)-1]
				i, line = skipTemplateRest(code, i+1, line)
				if i < len(code) && code[i] == '{' {
					templates = append(templates, depth)
					depth++
				}
			}
		}
		prev = c
	}
	return nil
}

// skipQuoted returns the index of the closing quote of the string at i.
func skipQuoted(code string, i int, q byte, line int) (int, int) {
	for i++; i < len(code) && code[i] != q; i++ {
		switch code[i] {
		case '\\':
			i++
		case '\n':
			line++ // an unterminated string: the parser will say so
		}
	}
	return i, line
}

// skipTemplate skips a template literal from its opening backquote to its
// end (returning the closing backquote's index) or to a ${ (returning the
// index of its brace).
func skipTemplate(code string, i int, line int) (int, int) {
	return skipTemplateRest(code, i+1, line)
}

func skipTemplateRest(code string, i int, line int) (int, int) {
	for ; i < len(code); i++ {
		switch code[i] {
		case '\\':
			i++
		case '\n':
			line++
		case '`':
			return i, line
		case '$':
			if i+1 < len(code) && code[i+1] == '{' {
				return i + 1, line
			}
		}
	}
	return i, line
}

// regexCanStart reports whether a '/' after prev begins a regular
// expression rather than a division.
func regexCanStart(prev byte) bool {
	return prev == 0 || strings.IndexByte("(,=:[!&|?{};+-*%<>~^", prev) >= 0
}

// skipRegexp returns the index of the '/' that ends the literal at i.
func skipRegexp(code string, i int) int {
	class := false
	for i++; i < len(code) && code[i] != '\n'; i++ {
		switch c := code[i]; {
		case c == '\\':
			i++
		case c == '[':
			class = true
		case c == ']':
			class = false
		case c == '/' && !class:
			return i
		}
	}
	return i
}
