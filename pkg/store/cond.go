package store

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Op is a condition's operator.
type Op uint8

// The operators. A field may hold several values (a patient's names); a
// condition on it holds when some value meets it, and two conditions on one
// field may be met by different values, as in MongoDB.
const (
	// OpEq: some value equals one of Values.
	OpEq Op = iota + 1
	// OpNotIn: no value equals any of Values; a missing field matches.
	OpNotIn
	// OpPrefix: some string value starts with one of Values.
	OpPrefix
	// OpContains: some string value contains one of Values.
	OpContains
	// OpLt, OpLe, OpGt, OpGe: some value compares so with Values[0], a
	// float64 or a time.Time; values of another kind never match. On
	// FieldID alone Values[0] may be a string, ids comparing byte by byte:
	// that is how a long walk goes through a result in id order, a page
	// after the last id seen.
	OpLt
	OpLe
	OpGt
	OpGe
	// OpExists: the field has a value (Values[0] true) or has none (false).
	OpExists
	// OpAnd, OpOr combine Sub.
	OpAnd
	OpOr
)

// Cond is one condition of a search or an access policy. Values are
// strings, float64s, time.Times, or one bool for OpExists.
type Cond struct {
	Op     Op
	Field  string
	Values []any
	Sub    []Cond
}

// Eq is an equality with any of values.
func Eq(field string, values ...any) Cond { return Cond{Op: OpEq, Field: field, Values: values} }

// Strings is an equality with any of the strings.
func Strings(field string, values []string) Cond {
	vs := make([]any, len(values))
	for i, v := range values {
		vs[i] = v
	}
	return Eq(field, vs...)
}

// Compare is a comparison with one value.
func Compare(field string, op Op, v any) Cond { return Cond{Op: op, Field: field, Values: []any{v}} }

// Exists tests whether a field has a value.
func Exists(field string, present bool) Cond {
	return Cond{Op: OpExists, Field: field, Values: []any{present}}
}

// And holds when every condition holds; one condition stays itself.
func And(cs ...Cond) Cond {
	if len(cs) == 1 {
		return cs[0]
	}
	return Cond{Op: OpAnd, Sub: cs}
}

// Or holds when any condition holds; one condition stays itself.
func Or(cs ...Cond) Cond {
	if len(cs) == 1 {
		return cs[0]
	}
	return Cond{Op: OpOr, Sub: cs}
}

// Matches evaluates c against a resource's fields in memory, with the
// semantics every adapter's search has: access policies check a single
// resource with it, and the conformance suite holds each adapter to it.
func Matches(c Cond, get func(field string) (any, bool)) bool {
	switch c.Op {
	case OpAnd:
		for _, s := range c.Sub {
			if !Matches(s, get) {
				return false
			}
		}
		return true
	case OpOr:
		for _, s := range c.Sub {
			if Matches(s, get) {
				return true
			}
		}
		return false
	}
	v, present := get(c.Field)
	if present && isEmpty(v) {
		present = false // a store keeps one row per value: no values, no field
	}
	switch c.Op {
	case OpExists:
		want, _ := c.Values[0].(bool)
		return present == want
	case OpNotIn:
		return !present || !anyValue(v, func(x any) bool { return inList(x, c.Values) })
	case OpEq:
		return present && anyValue(v, func(x any) bool { return inList(x, c.Values) })
	case OpPrefix, OpContains:
		return present && anyValue(v, func(x any) bool {
			s, ok := x.(string)
			if !ok {
				return false
			}
			for _, w := range c.Values {
				p, _ := w.(string)
				if c.Op == OpPrefix && strings.HasPrefix(s, p) || c.Op == OpContains && strings.Contains(s, p) {
					return true
				}
			}
			return false
		})
	case OpLt, OpLe, OpGt, OpGe:
		return present && anyValue(v, func(x any) bool {
			n, ok := compare(x, c.Values[0])
			switch {
			case !ok:
				return false
			case c.Op == OpLt:
				return n < 0
			case c.Op == OpLe:
				return n <= 0
			case c.Op == OpGt:
				return n > 0
			}
			return n >= 0
		})
	}
	return false
}

// Check refuses a condition an adapter could not translate faithfully.
func Check(c Cond) error {
	switch c.Op {
	case OpAnd, OpOr:
		if len(c.Sub) == 0 {
			return fmt.Errorf("store: empty and/or")
		}
		for _, s := range c.Sub {
			if err := Check(s); err != nil {
				return err
			}
		}
		return nil
	case OpExists:
		if len(c.Values) != 1 {
			return fmt.Errorf("store: exists on %s needs one bool", c.Field)
		}
		if _, ok := c.Values[0].(bool); !ok {
			return fmt.Errorf("store: exists on %s needs one bool", c.Field)
		}
	case OpEq, OpNotIn, OpPrefix, OpContains:
		if len(c.Values) == 0 {
			return fmt.Errorf("store: no values for %s", c.Field)
		}
		for _, v := range c.Values {
			switch x := v.(type) {
			case string:
			case float64, time.Time:
				if f, ok := x.(float64); ok && math.IsNaN(f) {
					return fmt.Errorf("store: NaN for %s", c.Field)
				}
				if c.Op == OpPrefix || c.Op == OpContains {
					return fmt.Errorf("store: text match on %s needs strings", c.Field)
				}
			default:
				return fmt.Errorf("store: unsupported value for %s: %T", c.Field, v)
			}
		}
	case OpLt, OpLe, OpGt, OpGe:
		if len(c.Values) != 1 {
			return fmt.Errorf("store: comparison on %s needs one value", c.Field)
		}
		switch x := c.Values[0].(type) {
		case float64:
			if math.IsNaN(x) {
				return fmt.Errorf("store: NaN for %s", c.Field)
			}
		case time.Time:
		case string:
			if c.Field != FieldID {
				return fmt.Errorf("store: string comparison on %s: only ids compare as strings", c.Field)
			}
		default:
			return fmt.Errorf("store: unsupported comparison value for %s: %T", c.Field, c.Values[0])
		}
	default:
		return fmt.Errorf("store: unknown operator %d", c.Op)
	}
	if c.Field == "" {
		return fmt.Errorf("store: condition without a field")
	}
	return nil
}

func isEmpty(v any) bool {
	switch l := v.(type) {
	case []string:
		return len(l) == 0
	case []float64:
		return len(l) == 0
	case []any:
		return len(l) == 0
	}
	return false
}

func inList(x any, list []any) bool {
	for _, w := range list {
		if n, ok := compare(x, w); ok && n == 0 {
			return true
		}
		if s, ok := x.(string); ok {
			if t, ok := w.(string); ok && s == t {
				return true
			}
		}
	}
	return false
}

// anyValue applies f to a single value or to each value of a list.
func anyValue(v any, f func(any) bool) bool {
	switch l := v.(type) {
	case []string:
		for _, x := range l {
			if f(x) {
				return true
			}
		}
		return false
	case []float64:
		for _, x := range l {
			if f(x) {
				return true
			}
		}
		return false
	case []any:
		for _, x := range l {
			if f(x) {
				return true
			}
		}
		return false
	}
	return f(v)
}

// compare orders two numbers or two instants; ok is false for other pairs.
func compare(a, b any) (int, bool) {
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		return strings.Compare(x, y), ok
	}
	if x, ok := a.(time.Time); ok {
		y, ok := b.(time.Time)
		if !ok {
			return 0, false
		}
		return x.Compare(y), true
	}
	x, ok1 := a.(float64)
	y, ok2 := b.(float64)
	if !ok1 || !ok2 || math.IsNaN(x) || math.IsNaN(y) {
		return 0, false
	}
	switch {
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}

// String renders a condition for logs and tests: a=x, a in [x y],
// a not in [x], a^=x (prefix), a*=x (contains), a<x, a exists, a missing,
// (c and d), (c or d). Times print in RFC 3339 with milliseconds.
func (c Cond) String() string {
	switch c.Op {
	case OpAnd, OpOr:
		sep := " and "
		if c.Op == OpOr {
			sep = " or "
		}
		parts := make([]string, len(c.Sub))
		for i, s := range c.Sub {
			parts[i] = s.String()
		}
		return "(" + strings.Join(parts, sep) + ")"
	case OpExists:
		if b, _ := c.Values[0].(bool); b {
			return c.Field + " exists"
		}
		return c.Field + " missing"
	}
	vals := make([]string, len(c.Values))
	for i, v := range c.Values {
		switch x := v.(type) {
		case time.Time:
			vals[i] = x.UTC().Format("2006-01-02T15:04:05.000Z")
		case string:
			vals[i] = fmt.Sprintf("%q", x)
		default:
			vals[i] = fmt.Sprint(x)
		}
	}
	list := strings.Join(vals, " ")
	if len(vals) != 1 {
		list = "[" + list + "]"
	}
	op := map[Op]string{OpEq: "=", OpNotIn: " not in ", OpPrefix: "^=", OpContains: "*=",
		OpLt: "<", OpLe: "<=", OpGt: ">", OpGe: ">="}[c.Op]
	if c.Op == OpEq && len(vals) != 1 {
		op = " in "
	}
	return c.Field + op + list
}
