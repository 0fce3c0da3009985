package projects

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// A policy reference is checked against the store: one that is not there
// is the caller's 400, but a store that fails is not, and must reach the
// caller as the failure it is (a 5xx), not as "does not exist". Both were
// once the same 400.
func TestCheckPolicyRefTellsMissingFromFailing(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := r.Create(ctx, repo.Scope{Project: "p1"}, map[string]any{"resourceType": "AccessPolicy", "name": "x"}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ref, project string
		want         string // the 400's text; "" for none
	}{
		{"AccessPolicy/" + pol.ID, "p1", ""},
		{"AccessPolicy/" + pol.ID, "p2", "Access policy AccessPolicy/" + pol.ID + " does not belong to this project"},
		{"AccessPolicy/missing", "p1", "Access policy AccessPolicy/missing does not exist"},
		{"Patient/" + pol.ID, "p1", "Invalid access policy reference"},
		{"not a reference", "p1", "Invalid access policy reference"},
	}
	for _, c := range cases {
		err := CheckPolicyRef(ctx, r, c.project, c.ref, "accessPolicy")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s in %s: %v", c.ref, c.project, err)
		case c.want != "" && (!errors.Is(err, fhir.ErrBadRequest) || fhir.AsError(err).Message() != c.want):
			t.Errorf("%s in %s: %v, want 400 %q", c.ref, c.project, err, c.want)
		}
	}
	st.Close()
	err = CheckPolicyRef(ctx, r, "p1", "AccessPolicy/uncached", "accessPolicy")
	if err == nil || errors.Is(err, fhir.ErrBadRequest) || errors.Is(err, fhir.ErrNotFound) {
		t.Fatalf("with the store closed: %v, want a failure that is no 4xx", err)
	}
}
