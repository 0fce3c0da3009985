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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of an expression when parsed: its length and how deeply its
// parentheses, arguments and indexers nest. Subscription criteria are
// checked against them when written.
const (
	MaxLength = 2000
	MaxDepth  = 32
	// maxPattern bounds a regular expression matches() compiles.
	maxPattern = 1000
)

// Bounds of one evaluation. Work is counted in cost units: a byte of a
// string read, compared or written is one unit (a regular expression's
// byte costs regexByteCost), and each item visited, operator applied or
// function called is StepCost. Each function is charged before it runs,
// by the size of its input, so a costly call is refused rather than
// made. MaxEvalTime backs the count with the clock: it is read every
// clockEvery units.
const (
	MaxCost       = 8 << 20
	StepCost      = 32
	MaxEvalTime   = 50 * time.Millisecond
	regexByteCost = 16
	clockEvery    = 64 << 10
)

// ErrBudget is the error of an evaluation that spent its budget (cost,
// time, or its context's deadline) before it ended.
var ErrBudget = errors.New("the FHIRPath evaluation budget is spent")

// Budget is what one evaluation may spend; a zero field is the default
// (MaxCost, MaxEvalTime). A context's earlier deadline applies too.
type Budget struct {
	Cost int64
	Time time.Duration
}

// Expr is a parsed expression.
type Expr struct {
	src  string
	root node
}

// String is the expression as written.
func (e *Expr) String() string { return e.src }

// Parse reads an expression; an error names what is not understood or
// which bound it passes.
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

// Evaluate evaluates the expression with this as its focus ($this and the
// start of a path) and vars as its %variables (names without the %),
// within budget b and ctx. An evaluation that spends its budget stops
// and returns an error wrapping ErrBudget.
func (e *Expr) Evaluate(ctx context.Context, this any, vars map[string]any, b Budget) ([]any, error) {
	en := newEnv(ctx, vars, b)
	if en.charge(0) {
		return nil, en.err
	}
	out := e.root.eval(en, collection(this))
	if en.err != nil {
		return nil, en.err
	}
	return out, nil
}

// IsTrue reports whether the expression evaluates to the single value
// true, within budget b and ctx; an error wraps ErrBudget.
func (e *Expr) IsTrue(ctx context.Context, this any, vars map[string]any, b Budget) (bool, error) {
	out, err := e.Evaluate(ctx, this, vars, b)
	if err != nil {
		return false, err
	}
	v, ok := single(out).(bool)
	return len(out) == 1 && ok && v, nil
}

// Eval is Evaluate with the default budget; one that spends it answers
// empty.
func (e *Expr) Eval(this any, vars map[string]any) []any {
	out, _ := e.Evaluate(context.Background(), this, vars, Budget{})
	return out
}

// True is IsTrue with the default budget; one that spends it is false.
func (e *Expr) True(this any, vars map[string]any) bool {
	ok, _ := e.IsTrue(context.Background(), this, vars, Budget{})
	return ok
}

// env is one evaluation: its variables and what it has spent.
type env struct {
	vars     map[string]any
	ctx      context.Context
	cost     int64
	limit    int64
	deadline time.Time
	window   time.Duration
	clockAt  int64 // the cost at which the clock is read next
	err      error
}

func newEnv(ctx context.Context, vars map[string]any, b Budget) *env {
	if b.Cost <= 0 {
		b.Cost = MaxCost
	}
	if b.Time <= 0 {
		b.Time = MaxEvalTime
	}
	return &env{vars: vars, ctx: ctx, limit: b.Cost, deadline: time.Now().Add(b.Time), window: b.Time}
}

// charge counts units of work about to be done and reports whether the
// budget is spent (then e.err says how, and the work is not to be done).
func (e *env) charge(units int64) bool {
	if e.err != nil {
		return true
	}
	e.cost += units
	if e.cost > e.limit {
		e.err = fmt.Errorf("%w: more than %d units of work", ErrBudget, e.limit)
		return true
	}
	if e.cost >= e.clockAt {
		e.clockAt = e.cost + clockEvery
		if err := context.Cause(e.ctx); err != nil {
			e.err = fmt.Errorf("%w: %w", ErrBudget, err)
		} else if time.Now().After(e.deadline) {
			e.err = fmt.Errorf("%w: longer than %s", ErrBudget, e.window)
		}
	}
	return e.err != nil
}

// step charges n items visited.
func (e *env) step(n int) bool { return e.charge(int64(n) * StepCost) }

// bytes charges n bytes of string work and one step.
func (e *env) bytes(n int) bool { return e.charge(int64(n) + StepCost) }

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
	if p.depth > MaxDepth {
		return nil, fmt.Errorf("the expression nests more than %d deep", MaxDepth)
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
	c := &call{of: n, name: t.text, f: f, args: args}
	if t.text == "matches" {
		// A literal pattern is compiled once, and refused when written.
		if l, ok := args[0].(literal); ok {
			src, _ := l.v.(string)
			re, err := compilePattern(src)
			if err != nil {
				return nil, fmt.Errorf("matches() at %d: %w", t.pos, err)
			}
			c.re = re
		}
	}
	return c, nil
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

// Every node charges a step when evaluated, and stops, empty, once the
// evaluation's budget is spent.
type node interface {
	eval(e *env, focus []any) []any
}

type literal struct{ v any }

func (l literal) eval(e *env, _ []any) []any {
	if e.step(1) {
		return nil
	}
	return collection(l.v)
}

type this struct{}

func (this) eval(e *env, focus []any) []any {
	if e.step(1) {
		return nil
	}
	return focus
}

type variable string

func (v variable) eval(e *env, _ []any) []any {
	c := collection(e.vars[string(v)])
	if e.step(1 + len(c)) {
		return nil
	}
	return c
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
			c := collection(v)
			if e.step(len(c)) {
				return nil
			}
			out = append(out, c...)
			continue
		}
		// A choice element: value is valueString, valueQuantity, …
		// Every key is looked at: an object of many keys costs as many.
		if e.step(len(m)) {
			return nil
		}
		for k, v := range m {
			if len(k) > len(f.name) && strings.HasPrefix(k, f.name) && unicode.IsUpper(rune(k[len(f.name)])) {
				c := collection(v)
				if e.step(len(c)) {
					return nil
				}
				out = append(out, c...)
			}
		}
	}
	return out
}

type index struct{ of, i node }

func (x *index) eval(e *env, focus []any) []any {
	c := x.of.eval(e, focus)
	n, ok := number(single(x.i.eval(e, focus)))
	if e.step(1) {
		return nil
	}
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
	re   *regexp.Regexp // matches() with a literal pattern
}

func (c *call) eval(e *env, focus []any) []any {
	in := c.of.eval(e, focus)
	if e.step(1) {
		return nil
	}
	return c.f.do(e, c, in)
}

type binary struct {
	op   string
	l, r node
}

func (b *binary) eval(e *env, focus []any) []any {
	l := b.l.eval(e, focus)
	if e.step(1) {
		return nil
	}
	switch b.op {
	case "and", "or", "xor", "implies":
		return logic(b.op, truth(l), truth(b.r.eval(e, focus)))
	}
	r := b.r.eval(e, focus)
	if e.err != nil {
		return nil
	}
	switch b.op {
	case "|":
		out := append([]any{}, l...)
		for _, v := range r {
			if !e.contains(out, v) {
				out = append(out, v)
			}
		}
		if e.err != nil {
			return nil
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
			eq = e.equal(l[i], r[i], b.op[len(b.op)-1] == '~')
		}
		if e.err != nil {
			return nil
		}
		return []any{eq == (b.op == "=" || b.op == "~")}
	}
	// <, <=, >, >=
	if len(l) != 1 || len(r) != 1 {
		return nil
	}
	c, ok := e.compare(l[0], r[0])
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
// equivalence, ignoring case and surrounding space), objects and lists
// member by member, each charged by the bytes and items it compares.
func (e *env) equal(a, b any, equivalent bool) bool {
	if e.step(1) {
		return false
	}
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		if !ok {
			return false
		}
		if equivalent {
			if e.charge(int64(len(x) + len(y))) {
				return false
			}
			return strings.EqualFold(strings.TrimSpace(x), strings.TrimSpace(y))
		}
		if e.charge(int64(min(len(x), len(y)))) {
			return false
		}
		return x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !e.equal(v, w, equivalent) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !e.equal(x[i], y[i], equivalent) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b) // booleans and nulls
}

// contains reports whether c holds an item equal to v.
func (e *env) contains(c []any, v any) bool {
	for _, x := range c {
		if e.equal(x, v, false) {
			return true
		}
	}
	return false
}

// compare orders numbers, and strings (dates in ISO form among them).
func (e *env) compare(a, b any) (int, bool) {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return cmp.Compare(x, y), ok
	}
	x, ok1 := a.(string)
	y, ok2 := b.(string)
	if !ok1 || !ok2 || e.bytes(min(len(x), len(y))) {
		return 0, false
	}
	return strings.Compare(x, y), true
}

// ---- functions ----

type fn struct {
	min, max int
	do       func(e *env, c *call, in []any) []any
}

// funcs are the supported functions.
var funcs map[string]fn

// stringFn is a function of a single string and string arguments. cost is
// what it will spend on its input and arguments, charged before it runs;
// f answers nil for an empty result.
func stringFn(lo, hi int, cost func(s string, args []string) int64, f func(e *env, c *call, s string, args []string) any) fn {
	return fn{lo, hi, func(e *env, c *call, in []any) []any {
		s, ok := single(in).(string)
		if !ok {
			return nil
		}
		var as []string
		for _, a := range c.args {
			v, ok := single(a.eval(e, in)).(string)
			if !ok {
				return nil
			}
			as = append(as, v)
		}
		if e.charge(StepCost + cost(s, as)) {
			return nil
		}
		return collection(f(e, c, s, as))
	}}
}

// linear is the cost of a function that reads its input and arguments
// once; twice is one that also writes as much as it reads.
func linear(s string, args []string) int64 {
	n := int64(len(s))
	for _, a := range args {
		n += int64(len(a))
	}
	return n
}

func twice(s string, args []string) int64 { return 2 * linear(s, args) }

// compilePattern compiles a matches() pattern, bounded in length. Go's
// regular expressions run in time linear in their input.
func compilePattern(src string) (*regexp.Regexp, error) {
	if len(src) > maxPattern {
		return nil, fmt.Errorf("a pattern is at most %d characters", maxPattern)
	}
	return regexp.Compile(src)
}

func init() {
	pure := func(f func(s string, args []string) any) func(*env, *call, string, []string) any {
		return func(_ *env, _ *call, s string, args []string) any { return f(s, args) }
	}
	funcs = map[string]fn{
		"exists": {0, 1, func(e *env, c *call, in []any) []any {
			if len(c.args) == 1 {
				in = where(e, in, c.args[0])
			}
			return []any{len(in) > 0}
		}},
		"empty":    {0, 0, func(_ *env, _ *call, in []any) []any { return []any{len(in) == 0} }},
		"hasValue": {0, 0, func(_ *env, _ *call, in []any) []any { return []any{len(in) == 1 && !isObject(in[0])} }},
		"not": {0, 0, func(_ *env, _ *call, in []any) []any {
			if t := truth(in); t >= 0 {
				return []any{t == 0}
			}
			return nil
		}},
		"count": {0, 0, func(_ *env, _ *call, in []any) []any { return []any{float64(len(in))} }},
		"first": {0, 0, func(_ *env, _ *call, in []any) []any {
			if len(in) == 0 {
				return nil
			}
			return in[:1]
		}},
		"last": {0, 0, func(_ *env, _ *call, in []any) []any {
			if len(in) == 0 {
				return nil
			}
			return in[len(in)-1:]
		}},
		"where": {1, 1, func(e *env, c *call, in []any) []any { return where(e, in, c.args[0]) }},
		"all": {1, 1, func(e *env, c *call, in []any) []any {
			kept := where(e, in, c.args[0])
			if e.err != nil {
				return nil
			}
			return []any{len(kept) == len(in)}
		}},
		"startsWith": stringFn(1, 1, linear, pure(func(s string, a []string) any { return strings.HasPrefix(s, a[0]) })),
		"endsWith":   stringFn(1, 1, linear, pure(func(s string, a []string) any { return strings.HasSuffix(s, a[0]) })),
		"contains":   stringFn(1, 1, twice, pure(func(s string, a []string) any { return strings.Contains(s, a[0]) })),
		"indexOf": stringFn(1, 1, twice, pure(func(s string, a []string) any {
			i := strings.Index(s, a[0])
			if i > 0 {
				i = utf8.RuneCountInString(s[:i])
			}
			return float64(i)
		})),
		"lower":  stringFn(0, 0, twice, pure(func(s string, _ []string) any { return strings.ToLower(s) })),
		"upper":  stringFn(0, 0, twice, pure(func(s string, _ []string) any { return strings.ToUpper(s) })),
		"trim":   stringFn(0, 0, linear, pure(func(s string, _ []string) any { return strings.TrimSpace(s) })),
		"length": stringFn(0, 0, linear, pure(func(s string, _ []string) any { return float64(utf8.RuneCountInString(s)) })),
		// A regular expression's work grows with its input times its
		// program, whose size the pattern's length stands for.
		"matches": stringFn(1, 1, func(s string, a []string) int64 {
			return (regexByteCost + int64(len(a[0]))) * int64(len(s)+len(a[0]))
		}, func(e *env, c *call, s string, a []string) any {
			re := c.re
			if re == nil {
				var err error
				if re, err = compilePattern(a[0]); err != nil {
					return nil // a pattern from the data that is no pattern matches nothing
				}
			}
			return re.MatchString(s)
		}),
		// replace() may grow its input: what it writes is charged, after
		// counting the occurrences, before it is written.
		"replace": stringFn(2, 2, twice, func(e *env, _ *call, s string, a []string) any {
			n := strings.Count(s, a[0])
			if e.charge(int64(len(s)) + int64(n)*int64(len(a[1]))) {
				return nil
			}
			return strings.ReplaceAll(s, a[0], a[1])
		}),
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
	if e.err != nil {
		return nil
	}
	return out
}

func isObject(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}
