// Package fhirpath evaluates the part of FHIRPath that Medplum's
// subscription criteria use (the fhir-path-criteria-expression extension,
// e.g. "%previous.status != %current.status"): paths over a resource's
// JSON with choice types and indexers, the %variables given, string,
// number and boolean literals and {}, the equality, comparison, union and
// boolean operators, and the functions listed in funcs. Anything else is
// refused by Parse, naming it, so a criteria expression is either
// understood or refused when it is written — never silently false.
//
// Values are decoded JSON (map[string]any, []any, string, float64 or
// json.Number, bool). Collections follow FHIRPath: a path flattens lists,
// an empty operand makes an operator's result empty, and a boolean is
// true only as a collection of the single value true.
package fhirpath

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// Bounds of an expression: its length and nesting when parsed, and the
// items one evaluation may visit (nested where() over %variables could
// otherwise take time exponential in the nesting).
const (
	MaxLength = 2000
	maxDepth  = 64
	maxSteps  = 200_000
)

// Expr is a parsed expression.
type Expr struct {
	src  string
	root node
}

// String is the expression as written.
func (e *Expr) String() string { return e.src }

// Parse reads an expression; an error names what is not understood.
func Parse(src string) (*Expr, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("the expression is longer than %d characters", MaxLength)
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tEOF {
		return nil, fmt.Errorf("unexpected %q at %d", p.peek().text, p.peek().pos)
	}
	return &Expr{src: src, root: n}, nil
}

// Eval evaluates the expression with this as its focus ($this and the
// start of a path) and vars as its %variables (names without the %).
// An evaluation that reaches maxSteps stops and answers empty.
func (e *Expr) Eval(this any, vars map[string]any) []any {
	en := &env{vars: vars}
	out := e.root.eval(en, collection(this))
	if en.over() {
		return nil
	}
	return out
}

// True reports whether the expression evaluates to the single value true.
func (e *Expr) True(this any, vars map[string]any) bool {
	out := e.Eval(this, vars)
	b, ok := single(out).(bool)
	return len(out) == 1 && ok && b
}

type env struct {
	vars  map[string]any
	steps int
}

// step counts n items visited and reports whether the budget is spent.
func (e *env) step(n int) bool {
	e.steps += n
	return e.over()
}

func (e *env) over() bool { return e.steps > maxSteps }

// collection is a value as a collection: nothing for nil, a list's items,
// else the one value.
func collection(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		out := make([]any, 0, len(x))
		for _, i := range x {
			if i != nil {
				out = append(out, i)
			}
		}
		return out
	}
	return []any{v}
}

func single(c []any) any {
	if len(c) == 1 {
		return c[0]
	}
	return nil
}

// ---- lexing ----

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tString
	tNumber
	tVar
	tOp // punctuation and operators
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'':
			j, b := i+1, strings.Builder{}
			for ; j < len(s) && s[j] != '\''; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
					switch s[j] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					case 'r':
						b.WriteByte('\r')
					default:
						b.WriteByte(s[j])
					}
					continue
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{tString, b.String(), i})
			i = j + 1
		case c == '`':
			j := strings.IndexByte(s[i+1:], '`')
			if j < 0 {
				return nil, fmt.Errorf("unterminated name at %d", i)
			}
			out = append(out, token{tIdent, s[i+1 : i+1+j], i})
			i += j + 2
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9') {
				j++
			}
			out = append(out, token{tNumber, s[i:j], i})
			i = j
		case c == '%':
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("a variable needs a name at %d", i)
			}
			out = append(out, token{tVar, s[i+1 : j], i})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			out = append(out, token{tIdent, s[i:j], i})
			i = j
		default:
			two := ""
			if i+1 < len(s) {
				two = s[i : i+2]
			}
			switch two {
			case "!=", "!~", "<=", ">=":
				out = append(out, token{tOp, two, i})
				i += 2
				continue
			}
			if strings.IndexByte(".()[]{},=~<>|", c) < 0 {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			out = append(out, token{tOp, string(c), i})
			i++
		}
	}
	return append(out, token{tEOF, "", len(s)}), nil
}

func isIdentStart(c byte) bool { return c == '_' || c == '$' || unicode.IsLetter(rune(c)) }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' || c == '-' }

// ---- parsing ----

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) accept(kind tokKind, text string) bool {
	if t := p.peek(); t.kind == kind && t.text == text {
		p.i++
		return true
	}
	return false
}

func (p *parser) expect(text string) error {
	if !p.accept(tOp, text) {
		return fmt.Errorf("expected %q at %d", text, p.peek().pos)
	}
	return nil
}

// Binary operators by precedence, lowest first.
var levels = [][]string{
	{"implies"},
	{"or", "xor"},
	{"and"},
	{"=", "!=", "~", "!~"},
	{"<", "<=", ">", ">="},
	{"|"},
}

func (p *parser) expr(level int) (node, error) {
	if level == len(levels) {
		return p.invocation()
	}
	left, err := p.expr(level + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		op := ""
		for _, o := range levels[level] {
			if (t.kind == tOp || t.kind == tIdent) && t.text == o {
				op = o
			}
		}
		if op == "" {
			return left, nil
		}
		p.next()
		right, err := p.expr(level + 1)
		if err != nil {
			return nil, err
		}
		left = &binary{op: op, l: left, r: right}
	}
}

func (p *parser) invocation() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, fmt.Errorf("the expression nests more than %d deep", maxDepth)
	}
	n, err := p.term()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.accept(tOp, "."):
			t := p.next()
			if t.kind != tIdent {
				return nil, fmt.Errorf("expected a name after '.' at %d", t.pos)
			}
			if n, err = p.member(n, t); err != nil {
				return nil, err
			}
		case p.accept(tOp, "["):
			i, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			if err := p.expect("]"); err != nil {
				return nil, err
			}
			n = &index{of: n, i: i}
		default:
			return n, nil
		}
	}
}

// member is .name or .function(args) applied to n.
func (p *parser) member(n node, t token) (node, error) {
	if !p.accept(tOp, "(") {
		return &field{of: n, name: t.text}, nil
	}
	f, ok := funcs[t.text]
	if !ok {
		return nil, fmt.Errorf("the function %s() is not supported", t.text)
	}
	var args []node
	if !p.accept(tOp, ")") {
		for {
			a, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			args = append(args, a)
			if p.accept(tOp, ")") {
				break
			}
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
	}
	if len(args) < f.min || len(args) > f.max {
		return nil, fmt.Errorf("%s() takes %d to %d arguments", t.text, f.min, f.max)
	}
	return &call{of: n, name: t.text, f: f, args: args}, nil
}

func (p *parser) term() (node, error) {
	t := p.next()
	switch t.kind {
	case tString:
		return literal{t.text}, nil
	case tNumber:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", t.text)
		}
		return literal{f}, nil
	case tVar:
		return variable(t.text), nil
	case tIdent:
		switch t.text {
		case "true":
			return literal{true}, nil
		case "false":
			return literal{false}, nil
		case "$this":
			return this{}, nil
		}
		// A name starts a path from the focus; a function call applies to it.
		return p.member(this{}, t)
	case tOp:
		switch t.text {
		case "(":
			n, err := p.expr(0)
			if err != nil {
				return nil, err
			}
			return n, p.expect(")")
		case "{":
			return literal{nil}, p.expect("}")
		}
	}
	return nil, fmt.Errorf("unexpected %q at %d", t.text, t.pos)
}

// ---- evaluation ----

type node interface {
	eval(e *env, focus []any) []any
}

type literal struct{ v any }

func (l literal) eval(*env, []any) []any { return collection(l.v) }

type this struct{}

func (this) eval(_ *env, focus []any) []any { return focus }

type variable string

func (v variable) eval(e *env, _ []any) []any {
	return collection(e.vars[string(v)])
}

type field struct {
	of   node
	name string
}

func (f *field) eval(e *env, focus []any) []any {
	var out []any
	in := f.of.eval(e, focus)
	if e.step(len(in) + 1) {
		return nil
	}
	for _, item := range in {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		// A type name selects the resource itself (Patient.name).
		if rt, _ := m["resourceType"].(string); rt != "" && rt == f.name {
			out = append(out, m)
			continue
		}
		if v, ok := m[f.name]; ok {
			out = append(out, collection(v)...)
			continue
		}
		// A choice element: value is valueString, valueQuantity, …
		for k, v := range m {
			if len(k) > len(f.name) && strings.HasPrefix(k, f.name) && unicode.IsUpper(rune(k[len(f.name)])) {
				out = append(out, collection(v)...)
			}
		}
	}
	return out
}

type index struct{ of, i node }

func (x *index) eval(e *env, focus []any) []any {
	c := x.of.eval(e, focus)
	n, ok := number(single(x.i.eval(e, focus)))
	// Compared as floats: a huge or NaN index must not reach int().
	if !ok || !(n >= 0 && n < float64(len(c))) {
		return nil
	}
	return []any{c[int(n)]}
}

type call struct {
	of   node
	name string
	f    fn
	args []node
}

func (c *call) eval(e *env, focus []any) []any {
	return c.f.do(e, c.of.eval(e, focus), c.args)
}

type binary struct {
	op   string
	l, r node
}

func (b *binary) eval(e *env, focus []any) []any {
	l := b.l.eval(e, focus)
	switch b.op {
	case "and", "or", "xor", "implies":
		return logic(b.op, truth(l), truth(b.r.eval(e, focus)))
	}
	r := b.r.eval(e, focus)
	switch b.op {
	case "|":
		out := append([]any{}, l...)
		for _, v := range r {
			if !containsValue(out, v) {
				out = append(out, v)
			}
		}
		return out
	case "=", "!=", "~", "!~":
		if len(l) == 0 || len(r) == 0 {
			if b.op == "~" || b.op == "!~" {
				eq := len(l) == len(r)
				return []any{eq == (b.op == "~")}
			}
			return nil
		}
		eq := len(l) == len(r)
		for i := 0; eq && i < len(l); i++ {
			eq = equal(l[i], r[i], b.op[len(b.op)-1] == '~')
		}
		return []any{eq == (b.op == "=" || b.op == "~")}
	}
	// <, <=, >, >=
	if len(l) != 1 || len(r) != 1 {
		return nil
	}
	c, ok := compare(l[0], r[0])
	if !ok {
		return nil
	}
	switch b.op {
	case "<":
		return []any{c < 0}
	case "<=":
		return []any{c <= 0}
	case ">":
		return []any{c > 0}
	}
	return []any{c >= 0}
}

// truth is a collection as a three-valued boolean: 1 true, 0 false, -1 empty.
func truth(c []any) int {
	if len(c) == 0 {
		return -1
	}
	if b, ok := single(c).(bool); ok && !b {
		return 0
	}
	return 1 // a single non-boolean (or several) counts as true, as exists
}

func logic(op string, l, r int) []any {
	res := -1
	switch op {
	case "and":
		switch {
		case l == 0 || r == 0:
			res = 0
		case l == 1 && r == 1:
			res = 1
		}
	case "or":
		switch {
		case l == 1 || r == 1:
			res = 1
		case l == 0 && r == 0:
			res = 0
		}
	case "xor":
		if l >= 0 && r >= 0 {
			res = boolInt(l != r)
		}
	case "implies":
		switch {
		case l == 0 || r == 1:
			res = 1
		case l == 1 && r == 0:
			res = 0
		}
	}
	if res < 0 {
		return nil
	}
	return []any{res == 1}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// equal compares two items: numbers by value, strings exactly (or, for
// equivalence, ignoring case and surrounding space), anything else deeply.
func equal(a, b any, equivalent bool) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		if equivalent {
			return ok && strings.EqualFold(strings.TrimSpace(x), strings.TrimSpace(y))
		}
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func containsValue(c []any, v any) bool {
	for _, x := range c {
		if equal(x, v, false) {
			return true
		}
	}
	return false
}

// compare orders numbers, and strings (dates in ISO form among them).
func compare(a, b any) (int, bool) {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return cmp.Compare(x, y), ok
	}
	x, ok1 := a.(string)
	y, ok2 := b.(string)
	if !ok1 || !ok2 {
		return 0, false
	}
	return strings.Compare(x, y), true
}

// ---- functions ----

type fn struct {
	min, max int
	do       func(e *env, in []any, args []node) []any
}

// funcs are the supported functions.
var funcs map[string]fn

func init() {
	str := func(f func(s string, args []string) any) fn {
		return fn{0, 1, func(e *env, in []any, args []node) []any {
			s, ok := single(in).(string)
			if !ok {
				return nil
			}
			var as []string
			for _, a := range args {
				v, ok := single(a.eval(e, in)).(string)
				if !ok {
					return nil
				}
				as = append(as, v)
			}
			return collection(f(s, as))
		}}
	}
	funcs = map[string]fn{
		"exists": {0, 1, func(e *env, in []any, args []node) []any {
			if len(args) == 1 {
				in = where(e, in, args[0])
			}
			return []any{len(in) > 0}
		}},
		"empty":    {0, 0, func(_ *env, in []any, _ []node) []any { return []any{len(in) == 0} }},
		"hasValue": {0, 0, func(_ *env, in []any, _ []node) []any { return []any{len(in) == 1 && !isObject(in[0])} }},
		"not": {0, 0, func(_ *env, in []any, _ []node) []any {
			if t := truth(in); t >= 0 {
				return []any{t == 0}
			}
			return nil
		}},
		"count": {0, 0, func(_ *env, in []any, _ []node) []any { return []any{float64(len(in))} }},
		"first": {0, 0, func(_ *env, in []any, _ []node) []any {
			if len(in) == 0 {
				return nil
			}
			return in[:1]
		}},
		"last": {0, 0, func(_ *env, in []any, _ []node) []any {
			if len(in) == 0 {
				return nil
			}
			return in[len(in)-1:]
		}},
		"where": {1, 1, func(e *env, in []any, args []node) []any { return where(e, in, args[0]) }},
		"all": {1, 1, func(e *env, in []any, args []node) []any {
			return []any{len(where(e, in, args[0])) == len(in)}
		}},
		"startsWith": str(func(s string, a []string) any { return len(a) == 1 && strings.HasPrefix(s, a[0]) }),
		"endsWith":   str(func(s string, a []string) any { return len(a) == 1 && strings.HasSuffix(s, a[0]) }),
		"contains":   str(func(s string, a []string) any { return len(a) == 1 && strings.Contains(s, a[0]) }),
		"lower":      str(func(s string, _ []string) any { return strings.ToLower(s) }),
		"upper":      str(func(s string, _ []string) any { return strings.ToUpper(s) }),
		"length":     str(func(s string, _ []string) any { return float64(len([]rune(s))) }),
	}
}

// where keeps the items for which crit, with the item as its focus, is true.
func where(e *env, in []any, crit node) []any {
	var out []any
	for _, item := range in {
		if e.step(1) {
			return nil
		}
		if truth(crit.eval(e, []any{item})) == 1 {
			out = append(out, item)
		}
	}
	return out
}

func isObject(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}
