package access

import (
	"context"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// fakeStore is a Reader over a map of "Type/id" → resource.
type fakeStore map[string]*repo.Resource

func (f fakeStore) Read(_ context.Context, sc repo.Scope, typ, id string) (*repo.Resource, error) {
	res, ok := f[typ+"/"+id]
	if !ok || !(sc.AllProjects || sc.Project == res.Project) {
		return nil, fhir.NotFound()
	}
	return res, nil
}

func (f fakeStore) put(typ, id, version string, body any) {
	f[typ+"/"+id] = &repo.Resource{Type: typ, ID: id, VersionID: version, Project: project, JSON: js(body)}
}

func TestPoliciesCacheFollowsVersions(t *testing.T) {
	store := fakeStore{}
	store.put("ProjectMembership", "m1", "1", map[string]any{"profile": ref("Patient/me"), "accessPolicy": ref("AccessPolicy/portal")})
	store.put("AccessPolicy", "portal", "1", portal)
	ps := NewPolicies(store, nil)
	ctx := context.Background()
	p := member("Patient/me")

	a, err := ps.For(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ps.For(ctx, p); b != a {
		t.Error("the compiled policy was not reused")
	}
	// A new version of the policy is compiled afresh: Observation dropped.
	store.put("AccessPolicy", "portal", "2", map[string]any{"resource": []any{
		map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}})
	c, err := ps.For(ctx, p)
	if err != nil || c == a || c.Allow("Observation", Read) == nil {
		t.Fatalf("policy change not seen: %v %v", c, err)
	}
	// So is a new version of the membership: no policy, full access.
	store.put("ProjectMembership", "m1", "2", map[string]any{"profile": ref("Patient/me")})
	d, err := ps.For(ctx, p)
	if err != nil || d.Allow("Observation", Delete) != nil {
		t.Fatalf("membership change not seen: %v %v", d, err)
	}
	// Admin rights come from the principal and are part of the key.
	admin := *p
	admin.Admin = true
	e, err := ps.For(ctx, &admin)
	if err != nil || e == d || e.Allow("ProjectMembership", Read) != nil {
		t.Fatalf("admin: %v %v", e, err)
	}
}

func TestPoliciesErrors(t *testing.T) {
	store := fakeStore{}
	store.put("ProjectMembership", "m1", "1", map[string]any{"accessPolicy": ref("AccessPolicy/gone")})
	store.put("ProjectMembership", "m2", "1", map[string]any{"accessPolicy": ref("AccessPolicy/bad")})
	store.put("AccessPolicy", "bad", "1", map[string]any{"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?colour=blue"}}})
	// A policy of another project is not found from this one.
	store.put("ProjectMembership", "m3", "1", map[string]any{"accessPolicy": ref("AccessPolicy/foreign")})
	store.put("AccessPolicy", "foreign", "1", portal)
	store["AccessPolicy/foreign"].Project = "p2"
	ps := NewPolicies(store, nil)
	ctx := context.Background()
	cases := []struct {
		name   string
		p      *bus.Principal
		status int
	}{
		{"anonymous", nil, 401},
		{"membership gone", &bus.Principal{Project: project, Membership: "nope"}, 401},
		{"policy gone", &bus.Principal{Project: project, Membership: "m1"}, 400},
		{"policy does not compile", &bus.Principal{Project: project, Membership: "m2"}, 400},
		{"policy of another project", &bus.Principal{Project: project, Membership: "m3"}, 400},
		{"membership of another project", &bus.Principal{Project: "p2", Membership: "m3"}, 401},
		{"super admin reads nothing", &bus.Principal{SuperAdmin: true, Membership: "nope"}, 0},
	}
	for _, tc := range cases {
		_, err := ps.For(ctx, tc.p)
		if got := status(err); got != tc.status {
			t.Errorf("%s: %d (%v), want %d", tc.name, got, err, tc.status)
		}
	}
}
