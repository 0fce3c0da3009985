package fhirpath

import "testing"

// Any text either parses or is refused, and what parses evaluates without
// a panic within its budget.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"%previous.status != %current.status", "name.where(use = 'official').given.first() = 'Peter'",
		"name[0].family.startsWith('Ch') and active.not()", "(a | b).count() >= 2 implies {} ~ 'x'",
		"value.value > 5.5", "name[100000000000000000000000].family", "`weird name`.exists()", "'a\\'b'.length() = 3",
	} {
		f.Add(s)
	}
	res := map[string]any{"resourceType": "Patient", "active": true,
		"name": []any{map[string]any{"use": "official", "family": "Chalmers", "given": []any{"Peter"}}}}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := Parse(src)
		if err != nil {
			return
		}
		e.Eval(res, map[string]any{"current": res, "previous": map[string]any{}})
	})
}
