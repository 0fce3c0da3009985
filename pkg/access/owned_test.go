package access

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// owned is a stored resource of typ kept for owner ("-" for none).
func owned(typ, id, owner string) *repo.Resource {
	meta := map[string]any{"versionId": "1"}
	if owner != "-" {
		meta["security"] = []any{OwnerTag(owner)}
	}
	return stored(typ, id, string(js(map[string]any{"resourceType": typ, "id": id, "meta": meta})))
}

// A resource kept for a profile is read, found and changed by that profile
// and by admins only; other types, and untagged Binaries, are as before.
func TestOwnedResources(t *testing.T) {
	policy := map[string]any{"AccessPolicy/f": map[string]any{"resource": []any{
		map[string]any{"resourceType": "*", "hiddenFields": []any{"meta.source"}},
		map[string]any{"resourceType": "Binary", "criteria": "Binary?_id=b-mine,b-theirs,b-plain"},
	}}}
	admin := member("Practitioner/admin")
	admin.Admin = true
	callers := []struct {
		name     string
		p        *bus.Principal
		m        map[string]any
		policies map[string]any
	}{
		{"member without policy", member("Practitioner/me"), nil, nil},
		{"member with policy", member("Practitioner/me"), map[string]any{"accessPolicy": ref("AccessPolicy/f")}, policy},
		{"admin", admin, nil, nil},
	}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			pol := compile(t, c.p, c.m, c.policies)
			isAdmin := c.p.Admin
			for _, tc := range []struct {
				res  *repo.Resource
				want bool
			}{
				{owned("Binary", "b-mine", "Practitioner/me"), true},
				{owned("Binary", "b-theirs", "Practitioner/admin"), isAdmin},
				{owned("Binary", "b-plain", "-"), true},
				{owned("AsyncJob", "j-theirs", "Practitioner/admin"), isAdmin},
				{owned("AsyncJob", "j-mine", "Practitioner/me"), true},
				// Only the owned types are confined by the tag.
				{owned("Patient", "p-tagged", "Practitioner/admin"), true},
			} {
				res := tc.res
				ok, err := pol.Readable(Read, res)
				if err != nil || ok != tc.want {
					t.Errorf("%s/%s readable %v (%v), want %v", tc.res.Type, tc.res.ID, ok, err, tc.want)
				}
				// A search finds exactly what a read reaches.
				f, searched := pol.SearchFilter(tc.res.Type, Search)
				d := storedDoc(res)
				found := searched && (len(f) == 0 || store.Matches(store.And(f...), d.Field))
				if found != tc.want {
					t.Errorf("%s/%s found by a search %v, want %v (filter %v)", tc.res.Type, tc.res.ID, found, tc.want, f)
				}
				// Another's is not changed either.
				if err := pol.Write(Delete, tc.res.Type, res, nil, project); (err == nil) != tc.want {
					t.Errorf("%s/%s delete: %v, want allowed %v", tc.res.Type, tc.res.ID, err, tc.want)
				}
			}
			// A "*" entry's field rules still govern the owned types.
			if c.policies != nil {
				red, err := pol.Redact(stored("AsyncJob", "j-mine", `{"resourceType":"AsyncJob","meta":{"source":"x","security":[{"system":"`+OwnerSystem+`","code":"Practitioner/me"}]}}`))
				if err != nil || strings.Contains(string(red.JSON), `"source"`) {
					t.Errorf("the '*' entry's hidden field on an owned type: %s %v", red.JSON, err)
				}
			}
			// Nobody but admins makes a resource kept for someone else.
			after := map[string]any{"resourceType": "Binary", "meta": map[string]any{"security": []any{OwnerTag("Practitioner/admin")}}}
			if err := pol.Write(Create, "Binary", nil, after, project); (err == nil) != isAdmin {
				t.Errorf("create of a Binary kept for another: %v", err)
			}
		})
	}
}
