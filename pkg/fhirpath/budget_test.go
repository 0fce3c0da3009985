package fhirpath

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// bigPatient is the resource: a 1 MiB family and 25 identifiers.
func bigPatient() map[string]any {
	ids := make([]any, 25)
	for i := range ids {
		ids[i] = map[string]any{"system": "urn:x", "value": strings.Repeat("7", 16)}
	}
	return map[string]any{
		"resourceType": "Patient", "id": "big", "identifier": ids,
		"name": []any{map[string]any{"family": strings.Repeat("a", 1<<20)}},
	}
}

// Each string function on a 1 MiB string is charged by its bytes: with a
// budget of 256 KiB of work, one call spends it, and the evaluation says
// so with ErrBudget rather than answering.
func TestStringFunctionsChargeTheirBytes(t *testing.T) {
	res := bigPatient()
	vars := map[string]any{"current": res, "previous": map[string]any{}}
	small := Budget{Cost: 256 << 10}
	for _, src := range []string{
		"%current.name.family.lower() = 'x'",
		"%current.name.family.upper().exists()",
		"%current.name.family.contains('b')",
		"%current.name.family.length() > 5",
		"%current.name.family.matches('a+b')",
		"%current.name.family.replace('a', 'bb').exists()",
		"%current.name.family.startsWith('x')",
		"%current.name.family.indexOf('b') >= 0",
		"%current.name.family.trim().exists()",
		"%current.name.family = %current.name.family",
		"%current.name.family ~ %current.name.family",
		"(%current.name.family | %current.name.family).count() = 1",
		"%current.name.family > %current.name.family",
		"%current.name = %current.name",
	} {
		e, err := Parse(src)
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		out, err := e.Evaluate(context.Background(), res, vars, small)
		if !errors.Is(err, ErrBudget) || out != nil {
			t.Errorf("%s on 1 MiB: %v, %v; want ErrBudget", src, out, err)
		}
	}
}

// The attack: criteria that lower() a 1 MiB family for every
// identifier, nested, took tens of seconds. With the default budget the
// evaluation ends within its time limit, and says why.
func TestExpensiveCriteriaEndWithinTheirTime(t *testing.T) {
	res := bigPatient()
	vars := map[string]any{"current": res, "previous": map[string]any{}}
	inner := "%current.name.family.lower().upper().contains('zz')"
	src := inner
	for i := 0; i < 3; i++ {
		src = "%current.identifier.where(" + src + " or value.exists()).exists()"
	}
	e, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := e.IsTrue(context.Background(), res, vars, Budget{})
	took := time.Since(start)
	if !errors.Is(err, ErrBudget) || ok {
		t.Fatalf("IsTrue = %v, %v; want ErrBudget", ok, err)
	}
	t.Logf("expensive criteria stopped after %s: %v", took, err)
	if took > MaxEvalTime+time.Second {
		t.Fatalf("took %s, past the evaluation's time limit %s", took, MaxEvalTime)
	}
	// The evaluation's context ends it too: a cancelled one at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.IsTrue(ctx, res, vars, Budget{}); !errors.Is(err, ErrBudget) || !errors.Is(err, context.Canceled) {
		t.Fatalf("with a cancelled context: %v", err)
	}
	// A time limit alone ends an evaluation the cost would allow.
	long := Budget{Cost: 1 << 40, Time: 20 * time.Millisecond}
	start = time.Now()
	if _, err := e.IsTrue(context.Background(), res, vars, long); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "longer than 20ms") {
		t.Fatalf("with a 20 ms limit: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a 20 ms limit took %s", took)
	}
}

// Ordinary criteria on ordinary resources stay well inside the budget,
// including the new string functions.
func TestOrdinaryExpressionsWithinBudget(t *testing.T) {
	current := decode(t, patientJSON)
	vars := map[string]any{"current": current, "previous": map[string]any{}}
	for src, want := range map[string]bool{
		"%current.name.where(use = 'official').family.lower() = 'chalmers'": true,
		"name.family.first().matches('^Ch[a-z]+s$')":                        true,
		"name.family.first().matches('^ch')":                                false,
		"name.family.first().replace('al', 'AL') = 'ChALmers'":              true,
		"name.family.first().indexOf('mers') = 4":                           true,
		"'  x '.trim() = 'x'":                                               true,
		"telecom.value.first().length() = 14":                               true,
		"name.given.count() = 5 and gender.upper().startsWith('MA')":        true,
	} {
		e, err := Parse(src)
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		got, err := e.IsTrue(context.Background(), current, vars, Budget{})
		if err != nil || got != want {
			t.Errorf("%q = %v, %v; want %v", src, got, err, want)
		}
	}
}

// Expressions past the parse bounds are refused, naming the bound.
func TestParseBounds(t *testing.T) {
	// The expression itself is one level; each parenthesis another.
	deep := strings.Repeat("(", MaxDepth-1) + "1" + strings.Repeat(")", MaxDepth-1)
	if _, err := Parse(deep); err != nil {
		t.Fatalf("%d levels refused: %v", MaxDepth, err)
	}
	nested := "name.exists()"
	for i := 0; i < MaxDepth; i++ {
		nested = "name.where(" + nested + ").exists()"
	}
	for name, c := range map[string]struct{ src, want string }{
		"parentheses": {"(" + deep + ")", "nests more than 32 deep"},
		"arguments":   {nested, "nests more than 32 deep"},
		"length":      {"name.exists() and " + strings.Repeat("active and ", MaxLength/11) + "active", "longer than 2000 characters"},
		"pattern":     {"name.family.matches('" + strings.Repeat("a", 1001) + "')", "at most 1000 characters"},
		"bad pattern": {"name.family.matches('(')", "matches() at 12"},
		"arity":       {"name.family.replace('a')", "takes 2 to 2 arguments"},
	} {
		_, err := Parse(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
