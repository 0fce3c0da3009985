package signin

import (
	"reflect"
	"testing"
)

// /auth/me shows only what Medplum's client reads of the project and the
// membership: never a project's secrets or settings.
func TestMeFields(t *testing.T) {
	project := map[string]any{"resourceType": "Project", "id": "p1", "name": "Clinic", "strictMode": true,
		"secret": []any{map[string]any{"name": "API_KEY"}}, "site": []any{}, "setting": []any{}}
	if got, want := pick(project, meProjectFields...), map[string]any{"resourceType": "Project", "id": "p1", "name": "Clinic", "strictMode": true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("project %v, want %v", got, want)
	}
	membership := map[string]any{"resourceType": "ProjectMembership", "id": "m1", "admin": true, "user": map[string]any{"reference": "User/u1"},
		"accessPolicy": map[string]any{"reference": "AccessPolicy/a1"}, "externalId": "x"}
	if got, want := pick(membership, meMembershipFields...), map[string]any{"resourceType": "ProjectMembership", "id": "m1", "admin": true,
		"user": map[string]any{"reference": "User/u1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("membership %v, want %v", got, want)
	}
	if got := pick(nil, meProjectFields...); len(got) != 0 || got == nil {
		t.Fatalf("nothing read: %v", got)
	}
}
