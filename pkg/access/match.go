package access

import (
	"fmt"
	"regexp"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A policy's criteria are checked in two ways. Searches push the filter into
// the database query. Reads and writes check one resource in memory against
// the same filter, with the stored document's search fields computed by
// search.Fields: a write must be checked before it is stored, so the
// database cannot answer for the new content, and one way for reads and
// writes keeps them consistent. The matcher understands exactly the shapes
// search.Parse builds (equality, $in, $nin, $exists, $regex, $gt/$gte/$lt/
// $lte, $and, $or); a policy whose filter holds anything else does not
// compile (checkShape), so the two evaluations cannot silently disagree.

// fieldGetter returns a stored document's field and whether it is present.
type fieldGetter func(key string) (any, bool)

// matches reports whether a document meets a filter as MongoDB would: a
// condition on an array field holds when an element meets it, and each
// operator of one condition may be met by a different element (the
// repository never uses $elemMatch).
func matches(f bson.D, get fieldGetter) bool {
	for _, e := range f {
		switch e.Key {
		case "$and":
			for _, c := range conditions(e.Value) {
				if !matches(c, get) {
					return false
				}
			}
		case "$or":
			ok := false
			for _, c := range conditions(e.Value) {
				if matches(c, get) {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
		default:
			v, present := get(e.Key)
			if !fieldMatches(v, present, e.Value) {
				return false
			}
		}
	}
	return true
}

// conditions reads the operand of $and or $or.
func conditions(v any) []bson.D {
	var out []bson.D
	switch a := v.(type) {
	case bson.A:
		for _, x := range a {
			if d, ok := x.(bson.D); ok {
				out = append(out, d)
			}
		}
	case []bson.D:
		out = a
	}
	return out
}

// isOperators reports whether a condition is a document of $-operators.
func isOperators(c any) (bson.D, bool) {
	d, ok := c.(bson.D)
	if !ok || len(d) == 0 {
		return nil, false
	}
	for _, e := range d {
		if len(e.Key) == 0 || e.Key[0] != '$' {
			return nil, false
		}
	}
	return d, true
}

func fieldMatches(v any, present bool, cond any) bool {
	ops, ok := isOperators(cond)
	if !ok {
		return present && anyElement(v, func(x any) bool { return equal(x, cond) })
	}
	for _, op := range ops {
		if !operatorMatches(v, present, op) {
			return false
		}
	}
	return true
}

func operatorMatches(v any, present bool, op bson.E) bool {
	switch op.Key {
	case "$exists":
		want, _ := op.Value.(bool)
		return present == want
	case "$in":
		return present && inList(v, op.Value)
	case "$nin":
		return !present || !inList(v, op.Value)
	case "$regex":
		p, _ := op.Value.(string)
		re := compiled(p)
		return present && re != nil && anyElement(v, func(x any) bool {
			s, ok := x.(string)
			return ok && re.MatchString(s)
		})
	case "$gt", "$gte", "$lt", "$lte":
		return present && anyElement(v, func(x any) bool {
			c, ok := compare(x, op.Value)
			if !ok {
				return false
			}
			switch op.Key {
			case "$gt":
				return c > 0
			case "$gte":
				return c >= 0
			case "$lt":
				return c < 0
			}
			return c <= 0
		})
	}
	return false // checkShape keeps other operators out of compiled policies
}

// inList is $in: an element equals a listed value or matches a listed regex.
func inList(v any, list any) bool {
	return anyElement(v, func(x any) bool {
		for _, want := range listOf(list) {
			if re, ok := want.(bson.Regex); ok {
				s, isStr := x.(string)
				if r := compiled(re.Pattern); isStr && r != nil && r.MatchString(s) {
					return true
				}
				continue
			}
			if equal(x, want) {
				return true
			}
		}
		return false
	})
}

func listOf(v any) []any {
	switch a := v.(type) {
	case bson.A:
		return a
	case []any:
		return a
	case []string:
		out := make([]any, len(a))
		for i, s := range a {
			out[i] = s
		}
		return out
	case []float64:
		out := make([]any, len(a))
		for i, f := range a {
			out[i] = f
		}
		return out
	}
	return nil
}

// anyElement applies f to a scalar, or to each element of an array.
func anyElement(v any, f func(any) bool) bool {
	if list := listOf(v); list != nil {
		for _, x := range list {
			if f(x) {
				return true
			}
		}
		return false
	}
	return f(v)
}

func equal(a, b any) bool {
	if c, ok := compare(a, b); ok {
		return c == 0
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	return false
}

// compare orders two numbers or two instants; ok is false for other pairs,
// which MongoDB's type bracketing never matches either.
func compare(a, b any) (int, bool) {
	if x, ok := a.(time.Time); ok {
		y, ok := b.(time.Time)
		if !ok {
			return 0, false
		}
		return x.Compare(y), true
	}
	x, ok1 := number(a)
	y, ok2 := number(b)
	if !ok1 || !ok2 {
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

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

var regexps sync.Map // pattern → *regexp.Regexp (nil when invalid)

func compiled(p string) *regexp.Regexp {
	if re, ok := regexps.Load(p); ok {
		return re.(*regexp.Regexp)
	}
	re, err := regexp.Compile(p)
	if err != nil {
		re = nil
	}
	regexps.Store(p, re)
	return re
}

// checkShape refuses a filter the matcher would not evaluate as the
// database does.
func checkShape(f bson.D) error {
	for _, e := range f {
		switch e.Key {
		case "$and", "$or":
			cs := conditions(e.Value)
			if len(cs) == 0 {
				return fmt.Errorf("empty %s", e.Key)
			}
			for _, c := range cs {
				if err := checkShape(c); err != nil {
					return err
				}
			}
			continue
		}
		if len(e.Key) > 0 && e.Key[0] == '$' {
			return fmt.Errorf("unsupported operator %s", e.Key)
		}
		ops, ok := isOperators(e.Value)
		if !ok {
			if !scalar(e.Value) {
				return fmt.Errorf("unsupported value for %s: %T", e.Key, e.Value)
			}
			continue
		}
		for _, op := range ops {
			switch op.Key {
			case "$exists":
				if _, ok := op.Value.(bool); !ok {
					return fmt.Errorf("$exists on %s needs a boolean", e.Key)
				}
			case "$in", "$nin":
				if listOf(op.Value) == nil && op.Value != nil {
					return fmt.Errorf("%s on %s needs a list", op.Key, e.Key)
				}
				for _, x := range listOf(op.Value) {
					if _, isRe := x.(bson.Regex); !isRe && !scalar(x) {
						return fmt.Errorf("unsupported %s value on %s: %T", op.Key, e.Key, x)
					}
				}
			case "$regex":
				p, ok := op.Value.(string)
				if !ok || compiled(p) == nil {
					return fmt.Errorf("unsupported $regex on %s", e.Key)
				}
			case "$gt", "$gte", "$lt", "$lte":
				if _, isTime := op.Value.(time.Time); !isTime {
					if _, isNum := number(op.Value); !isNum {
						return fmt.Errorf("unsupported %s value on %s: %T", op.Key, e.Key, op.Value)
					}
				}
			default:
				return fmt.Errorf("unsupported operator %s on %s", op.Key, e.Key)
			}
		}
	}
	return nil
}

func scalar(v any) bool {
	switch v.(type) {
	case string, bool, time.Time:
		return true
	}
	_, ok := number(v)
	return ok
}
