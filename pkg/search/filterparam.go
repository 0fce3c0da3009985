package search

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// Limits on one _filter value, beyond MaxValuesPerQuery, which bounds its
// comparisons (each counts as one alternative of the query).
const (
	// MaxFilterBytes bounds the text of one _filter.
	MaxFilterBytes = 4096
	// MaxFilterDepth bounds the nesting of parentheses and not(...), so
	// the recursive parser's stack stays small.
	MaxFilterDepth = 16
)

// _filter is FHIR's filter expression (search_filter.html): comparisons
// "param op value" joined by and/or, negated by not(...), grouped by
// parentheses. It is translated into the same conditions the other
// parameters produce, so each comparison means what the parameter means
// elsewhere:
//
//	string     eq exact, ne not exact, sw starts with, co contains (both
//	           case- and accent-insensitive, as name=... and name:contains)
//	token      eq, ne (as :not); uri: eq, ne, sw (as :below)
//	reference  eq, re, ne
//	date, number, quantity  eq ne gt lt ge le sa eb ap (as the prefixes)
//	any        pr true|false (as :missing=false|true)
//
// As in Medplum, "and" and "or" bind equally and group to the right:
// "a and b or c" is "a and (b or c)"; parentheses say otherwise. The store
// has no general negation, so not(...) is accepted where its exact
// complement exists (equalities, ne, pr, and/or of them) and refused
// elsewhere rather than answered approximately. ew and the terminology
// operators (ss, sb, in, ni, po) are refused: the store cannot answer them.

// filterOps are the operators a comparison may use; false marks those
// FHIR defines but Pinion cannot answer.
var filterOps = map[string]bool{
	"eq": true, "ne": true, "co": true, "sw": true, "gt": true, "lt": true, "ge": true, "le": true,
	"sa": true, "eb": true, "ap": true, "pr": true, "re": true,
	"ew": false, "ss": false, "sb": false, "in": false, "ni": false, "po": false,
}

type filterTokenKind uint8

const (
	ftEOF filterTokenKind = iota
	ftOpen
	ftClose
	ftWord
	ftString // a quoted string, unescaped
)

type filterToken struct {
	kind filterTokenKind
	text string
	pos  int // byte offset in the expression
}

// filterParser reads one _filter expression into conditions.
type filterParser struct {
	src          string
	toks         []filterToken
	i            int
	depth        int
	resourceType string
	reg          *registry
	f            *filter // the query's conditions: comparisons count against its limits
}

// addFilterExpr parses one _filter value and adds its condition.
func (f *filter) addFilterExpr(reg *registry, resourceType, key, v string) error {
	if v == "" {
		return fhir.BadRequest("Empty value for search parameter "+key, key)
	}
	if len(v) > MaxFilterBytes {
		return fhir.BadRequest(fmt.Sprintf("Invalid _filter: %d bytes, at most %d", len(v), MaxFilterBytes), key)
	}
	p := &filterParser{src: v, resourceType: resourceType, reg: reg, f: f}
	if err := p.lex(); err != nil {
		return err
	}
	c, err := p.expr()
	if err != nil {
		return err
	}
	if t := p.peek(); t.kind != ftEOF {
		return p.errAt(t, "expected and, or or the end, found %s", describe(t))
	}
	f.add(c)
	return nil
}

// errAt is a 400 naming the character position (1-based) of t.
func (p *filterParser) errAt(t filterToken, format string, args ...any) error {
	pos := utf8.RuneCountInString(p.src[:t.pos]) + 1
	return fhir.BadRequest(fmt.Sprintf("Invalid _filter at position %d: ", pos)+fmt.Sprintf(format, args...), "_filter")
}

func describe(t filterToken) string {
	switch t.kind {
	case ftEOF:
		return "the end"
	case ftOpen:
		return `"("`
	case ftClose:
		return `")"`
	}
	return fmt.Sprintf("%q", clip(t.text))
}

// lex splits the expression into parentheses, quoted strings and words
// (runs of anything else up to a space or parenthesis).
func (p *filterParser) lex() error {
	s := p.src
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			p.toks = append(p.toks, filterToken{ftOpen, "(", i})
			i++
		case c == ')':
			p.toks = append(p.toks, filterToken{ftClose, ")", i})
			i++
		case c == '"':
			var b strings.Builder
			start := i
			i++
			closed := false
			for i < len(s) {
				if s[i] == '\\' && i+1 < len(s) {
					b.WriteByte(s[i+1])
					i += 2
					continue
				}
				if s[i] == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			if !closed {
				return p.errAt(filterToken{pos: start}, "unterminated string")
			}
			p.toks = append(p.toks, filterToken{ftString, b.String(), start})
		default:
			start := i
			for i < len(s) && !strings.ContainsRune(" \t\n\r()\"", rune(s[i])) {
				i++
			}
			p.toks = append(p.toks, filterToken{ftWord, s[start:i], start})
		}
	}
	return nil
}

func (p *filterParser) peek() filterToken {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return filterToken{kind: ftEOF, pos: len(p.src)}
}

func (p *filterParser) next() filterToken {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func isWord(t filterToken, w string) bool { return t.kind == ftWord && strings.EqualFold(t.text, w) }

// expr reads terms joined by and/or, grouped to the right as Medplum does.
func (p *filterParser) expr() (store.Cond, error) {
	var terms []store.Cond
	var ops []store.Op
	for {
		c, err := p.term()
		if err != nil {
			return store.Cond{}, err
		}
		terms = append(terms, c)
		switch t := p.peek(); {
		case isWord(t, "and"):
			ops = append(ops, store.OpAnd)
		case isWord(t, "or"):
			ops = append(ops, store.OpOr)
		default:
			// Fold from the right: a op1 (b op2 (c ...)).
			acc := terms[len(terms)-1]
			for i := len(ops) - 1; i >= 0; i-- {
				acc = join(ops[i], terms[i], acc)
			}
			return acc, nil
		}
		p.next()
	}
}

// join combines two conditions, flattening a junction of the same kind.
func join(op store.Op, a, b store.Cond) store.Cond {
	var sub []store.Cond
	for _, c := range []store.Cond{a, b} {
		if c.Op == op {
			sub = append(sub, c.Sub...)
		} else {
			sub = append(sub, c)
		}
	}
	return store.Cond{Op: op, Sub: sub}
}

// term reads a parenthesised expression, not(...), or a comparison.
func (p *filterParser) term() (store.Cond, error) {
	t := p.peek()
	negated := false
	if isWord(t, "not") {
		// "not" is a negation only before "("; otherwise it names a parameter.
		if p.i+1 < len(p.toks) && p.toks[p.i+1].kind == ftOpen {
			negated = true
			p.next()
			t = p.peek()
		}
	}
	if t.kind != ftOpen {
		return p.comparison()
	}
	p.next()
	if p.depth++; p.depth > MaxFilterDepth {
		return store.Cond{}, p.errAt(t, "nested more than %d deep", MaxFilterDepth)
	}
	c, err := p.expr()
	if err != nil {
		return store.Cond{}, err
	}
	p.depth--
	if end := p.next(); end.kind != ftClose {
		return store.Cond{}, p.errAt(end, `expected ")", found %s`, describe(end))
	}
	if negated {
		n, ok := negate(c)
		if !ok {
			return store.Cond{}, p.errAt(t, "not(...) is supported only around eq, ne and pr comparisons on tokens, references, URIs, ids and exact strings")
		}
		return n, nil
	}
	return c, nil
}

// negate is the exact complement of c, where the store can express it.
func negate(c store.Cond) (store.Cond, bool) {
	switch c.Op {
	case store.OpAnd, store.OpOr:
		sub := make([]store.Cond, len(c.Sub))
		for i, s := range c.Sub {
			n, ok := negate(s)
			if !ok {
				return c, false
			}
			sub[i] = n
		}
		if c.Op == store.OpAnd {
			return store.Cond{Op: store.OpOr, Sub: sub}, true
		}
		return store.Cond{Op: store.OpAnd, Sub: sub}, true
	case store.OpEq:
		// OpNotIn is "no value equals", missing included: OpEq's complement.
		return store.Cond{Op: store.OpNotIn, Field: c.Field, Values: c.Values}, true
	case store.OpNotIn:
		return store.Cond{Op: store.OpEq, Field: c.Field, Values: c.Values}, true
	case store.OpExists:
		b, _ := c.Values[0].(bool)
		return store.Exists(c.Field, !b), true
	}
	return c, false
}

// comparison reads "param op value" ("param pr true|false").
func (p *filterParser) comparison() (store.Cond, error) {
	pt := p.next()
	if pt.kind != ftWord {
		return store.Cond{}, p.errAt(pt, "expected a search parameter, found %s", describe(pt))
	}
	code := pt.text
	if strings.ContainsAny(code, ".[]:") {
		return store.Cond{}, p.errAt(pt, "parameter paths, filters and modifiers are not supported: %q", clip(code))
	}
	ot := p.next()
	if ot.kind != ftWord {
		return store.Cond{}, p.errAt(ot, "expected an operator after %q, found %s", clip(code), describe(ot))
	}
	op := strings.ToLower(ot.text)
	supported, known := filterOps[op]
	switch {
	case !known:
		return store.Cond{}, p.errAt(ot, "unknown operator %q", clip(ot.text))
	case !supported:
		return store.Cond{}, p.errAt(ot, "operator %s is not supported", op)
	}
	vt := p.next()
	if vt.kind != ftWord && vt.kind != ftString {
		return store.Cond{}, p.errAt(vt, "expected a value after %s, found %s", op, describe(vt))
	}
	if vt.text == "" {
		return store.Cond{}, p.errAt(vt, "empty value")
	}
	c, err := p.translate(code, op, vt.text)
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status == 400 {
			return store.Cond{}, p.errAt(pt, "%s", fe.Message())
		}
		return store.Cond{}, err
	}
	return c, nil
}

// escapeFilterValue protects a comparison's value from the comma and
// escape handling of ordinary parameter values: a filter value is one value.
func escapeFilterValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `$`, `\$`).Replace(v)
}

// translate is one comparison as the conditions of the matching ordinary
// parameter (with a modifier or a prefix), ANDed.
func (p *filterParser) translate(code, op, value string) (store.Cond, error) {
	sub := &filter{grams: p.f.grams, values: p.f.values, reads: p.f.reads}
	sub.reads[code] = true // _id and _lastUpdated too: a filter reveals what it tests
	defer func() { p.f.values = sub.values }()
	done := func(flip bool) (store.Cond, error) {
		c := store.And(sub.conds...)
		if flip {
			// ne on an equality: its exact complement.
			n, ok := negate(c)
			// (An :exact equality comes with the normalised one it
			// refines, and is negated with it: see addString.)
			if !ok || (c.Op != store.OpEq && c.Op != store.OpAnd) {
				return store.Cond{}, fhir.BadRequest(fmt.Sprintf("operator ne is not supported for %s", code))
			}
			c = n
		}
		return c, nil
	}
	unsupportedOp := func(kind string) (store.Cond, error) {
		return store.Cond{}, fhir.BadRequest(fmt.Sprintf("operator %s is not supported for %s parameter %s", op, kind, code))
	}
	esc := escapeFilterValue(value)
	switch code {
	case "_id":
		switch op {
		case "eq", "ne":
			if err := sub.addEach(code, []string{esc}, false, "", idCondition); err != nil {
				return store.Cond{}, err
			}
			return done(op == "ne")
		}
		return unsupportedOp("id")
	case "_lastUpdated":
		switch op {
		case "eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap":
			if err := sub.addDates(code, op+esc, "ts", "ts"); err != nil {
				return store.Cond{}, err
			}
			return done(false)
		}
		return unsupportedOp("date")
	}
	prm := p.reg.lookup(p.resourceType, code)
	if prm == nil {
		return store.Cond{}, fhir.BadRequest("Unknown search parameter: " + clip(code))
	}
	if op == "pr" {
		var missing string
		switch strings.ToLower(value) {
		case "true":
			missing = "false"
		case "false":
			missing = "true"
		default:
			return store.Cond{}, fhir.BadRequest("pr takes true or false")
		}
		if err := sub.addParam(prm, code, "missing", true, missing); err != nil {
			return store.Cond{}, err
		}
		return done(false)
	}
	add := func(modifier, v string) error {
		return sub.addParam(prm, code, modifier, modifier != "", v)
	}
	var err error
	flip := false
	switch prm.Type {
	case "string":
		switch op {
		case "eq":
			err = add("exact", esc)
		case "ne":
			err, flip = add("exact", esc), true
		case "sw":
			err = add("", esc)
		case "co":
			err = add("contains", esc)
		default:
			return unsupportedOp("string")
		}
	case "token":
		switch op {
		case "eq":
			err = add("", esc)
		case "ne":
			err = add("not", esc)
		default:
			return unsupportedOp("token")
		}
	case "reference":
		switch op {
		case "eq", "re":
			err = add("", esc)
		case "ne":
			err, flip = add("", esc), true
		default:
			return unsupportedOp("reference")
		}
	case "uri":
		switch op {
		case "eq":
			err = add("", esc)
		case "ne":
			err, flip = add("", esc), true
		case "sw":
			err = add("below", esc)
		default:
			return unsupportedOp("uri")
		}
	case "date", "number", "quantity":
		switch op {
		case "eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap":
			err = add("", op+esc)
		default:
			return unsupportedOp(prm.Type)
		}
	default:
		return unsupportedOp(prm.Type)
	}
	if err != nil {
		return store.Cond{}, err
	}
	return done(flip)
}
