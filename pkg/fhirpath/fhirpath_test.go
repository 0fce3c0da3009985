package fhirpath

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const patientJSON = `{"resourceType":"Patient","id":"example","active":true,"gender":"male",
 "name":[{"use":"official","family":"Chalmers","given":["Peter","James"]},
         {"use":"usual","given":["Jim"]},
         {"use":"maiden","family":"Windsor","given":["Peter","James"]}],
 "telecom":[{"system":"phone","value":"(03) 5555 6473","use":"work","rank":1}],
 "extension":[{"url":"http://example.com/score","valueQuantity":{"value":7.5,"unit":"pt"}}]}`

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTrue(t *testing.T) {
	current := decode(t, patientJSON)
	previous := decode(t, `{"resourceType":"Patient","id":"example","active":false,"gender":"male"}`)
	vars := map[string]any{"current": current, "previous": previous}
	cases := map[string]bool{
		// Medplum's documented shapes.
		"%previous.active != %current.active": true,
		"%previous.gender != %current.gender": false,
		"%current.active = true":              true,
		"%current.gender = 'female'":          false,
		// Paths, type names, indexers, choice elements.
		"Patient.name.where(use = 'official').given.first() = 'Peter'": true,
		"name[2].family = 'Windsor'":                                   true,
		"name[9].family = 'Windsor'":                                   false, // empty
		"name[100000000000000000000000].exists()":                      false, // once a panic: int() of a huge float
		"extension.value.value > 5":                                    true,
		"extension.valueQuantity.value <= 7":                           false,
		"telecom.where(system = 'phone' and rank = 1).exists()":        true,
		"telecom.exists(system = 'email')":                             false,
		"address.empty()":                                              true,
		"name.given.count() = 5":                                       true,
		"(name.family | name.family).count() = 2":                      true,
		"name.all(given.exists())":                                     true,
		// Strings and booleans, three-valued.
		"gender.startsWith('ma') and gender.length() = 4": true,
		"gender.upper() = 'MALE'":                         true,
		"gender ~ ' MALE '":                               true,
		"active.not() or deceased":                        false, // false or empty: empty
		"deceased.exists().not()":                         true,
		"deceased implies active":                         true,
		"active xor gender = 'male'":                      false,
		"{} = 'x'":                                        false, // empty
		"'2024-01-02' > '2023-12-31'":                     true,
		"$this.id = 'example'":                            true,
	}
	for src, want := range cases {
		e, err := Parse(src)
		if err != nil {
			t.Errorf("Parse(%q): %v", src, err)
			continue
		}
		if got := e.True(current, vars); got != want {
			t.Errorf("%q = %v (%v), want %v", src, got, e.Eval(current, vars), want)
		}
	}
	// On a create, Medplum's %previous is {}: a change test is not true.
	e, _ := Parse("%previous.active != %current.active")
	if e.True(current, map[string]any{"current": current, "previous": map[string]any{}}) {
		t.Error("a create counts as a change")
	}
}

func TestParseRefuses(t *testing.T) {
	for src, want := range map[string]string{
		"name.descendants()":          "descendants() is not supported",
		"name.given.join(',')":        "join() is not supported",
		"name.where()":                "takes 1 to 1 arguments",
		"name.":                       "expected a name",
		"'open":                       "unterminated string",
		"name.given = ":               "unexpected",
		"gender = 'a' &":              "unexpected",
		"%":                           "needs a name",
		"(active":                     `expected ")"`,
		strings.Repeat("(", 70) + "1": "nests more than",
		strings.Repeat("a", 2001):     "longer than",
	} {
		_, err := Parse(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.40q) = %v, want an error saying %q", src, err, want)
		}
	}
}

// Nested where() over a variable is exponential in the nesting: the step
// budget ends it, quickly and empty.
func TestEvaluationIsBounded(t *testing.T) {
	names := make([]any, 100)
	for i := range names {
		names[i] = map[string]any{"family": "x"}
	}
	res := map[string]any{"resourceType": "Patient", "name": names}
	src := "%r.name.exists()"
	for i := 0; i < 8; i++ {
		src = "%r.name.where(" + src + ").exists()"
	}
	e, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if e.True(res, map[string]any{"r": res}) {
		t.Error("an evaluation past its budget is true")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
}
