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
