package access

import (
	"context"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/subscription"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// A Subscription's secret reaches admins and its author only; every other
// member reads, searches and lists the history of the subscription without
// it, and keeps its other extensions.
func TestSubscriptionSecret(t *testing.T) {
	ctx := context.Background()
	r := testenv.New(t).Repo
	const author = "Practitioner/author"
	sub := map[string]any{"resourceType": "Subscription", "status": "active", "reason": "r", "criteria": "Patient",
		"channel": map[string]any{"type": "rest-hook", "endpoint": "https://hook.example/x"},
		"extension": []any{
			map[string]any{"url": subscription.ExtMaxAttempts, "valueInteger": 3},
			map[string]any{"url": subscription.ExtSecret, "valueString": "s3cret-value"},
		}}
	created, err := r.Create(ctx, repo.Scope{Project: project}, sub, repo.WriteOptions{Author: author})
	if err != nil {
		t.Fatal(err)
	}
	// An older version with the secret under Medplum's former URL.
	old := map[string]any{"resourceType": "Subscription", "id": created.ID, "status": "active", "reason": "r", "criteria": "Patient",
		"channel":   map[string]any{"type": "rest-hook", "endpoint": "https://hook.example/x"},
		"extension": []any{map[string]any{"url": "https://www.medplum.com/fhir/StructureDefinition-subscriptionSecret", "valueString": "s3cret-value"}}}
	if _, err := r.Update(ctx, repo.Scope{Project: project}, old, repo.WriteOptions{Author: author}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, repo.Scope{Project: project}, sub, repo.WriteOptions{Author: author}); err != nil {
		t.Fatal(err)
	}

	admin := member("Practitioner/admin")
	admin.Admin = true
	hidesFields := map[string]any{"resource": []any{map[string]any{"resourceType": "Subscription", "hiddenFields": []any{"reason"}}}}
	withHidden := member("Practitioner/other")
	withHidden.AccessPolicy = true
	cases := []struct {
		name    string
		pol     *Policy
		secret  bool
		hideRes bool // reason hidden by the policy
	}{
		{"the author", compile(t, member(author), nil, nil), true, false},
		{"another member", compile(t, member("Practitioner/other"), nil, nil), false, false},
		{"another member under hidden fields", compile(t, withHidden,
			map[string]any{"profile": ref("Practitioner/other"), "accessPolicy": ref("AccessPolicy/h")},
			map[string]any{"AccessPolicy/h": hidesFields}), false, true},
		{"a client of the project", compile(t, &bus.Principal{User: "ClientApplication/c", Profile: "ClientApplication/c", Project: project, Membership: "mc"}, nil, nil), false, false},
		{"an admin", compile(t, admin, nil, nil), true, false},
		{"a super admin", compile(t, &bus.Principal{SuperAdmin: true, Project: "sp"}, nil, nil), true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.pol.Gate(r, "Subscription", created.ID)
			check := func(what string, res *repo.Resource) {
				t.Helper()
				body := string(res.JSON)
				if got := strings.Contains(body, "s3cret-value"); got != tc.secret {
					t.Errorf("%s: secret shown %v, want %v: %s", what, got, tc.secret, body)
				}
				if !tc.secret && strings.Contains(body, "ubscription-secret") || !tc.secret && strings.Contains(body, "subscriptionSecret") {
					t.Errorf("%s: the secret's extension is left: %s", what, body)
				}
				if got := strings.Contains(body, `"reason"`); got == tc.hideRes {
					t.Errorf("%s: reason shown %v under hidden fields %v: %s", what, got, tc.hideRes, body)
				}
			}
			res, err := g.Read(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			check("read", res)
			if !strings.Contains(string(res.JSON), subscription.ExtMaxAttempts) {
				t.Errorf("read: another extension was dropped: %s", res.JSON)
			}
			versions, err := g.History(ctx, created.ID)
			if err != nil || len(versions) != 3 {
				t.Fatalf("history: %d versions, %v", len(versions), err)
			}
			for _, v := range versions {
				check("history", v)
			}
			q, err := search.Parse("Subscription", map[string][]string{"_id": {created.ID}})
			if err != nil {
				t.Fatal(err)
			}
			page, err := g.Search(ctx, q)
			if err != nil || len(page.Resources) != 1 {
				t.Fatalf("search: %v %v", page, err)
			}
			check("search", page.Resources[0])

			// Who does not see the secret may not change the subscription:
			// keeping the secret would make them its author, who sees it;
			// dropping it would stop the signatures silently.
			stored, err := r.Read(ctx, repo.Scope{Project: project}, "Subscription", created.ID)
			if err != nil {
				t.Fatal(err)
			}
			edit := map[string]any{"resourceType": "Subscription", "id": created.ID, "status": "off", "reason": "r", "criteria": "Patient",
				"channel": map[string]any{"type": "rest-hook", "endpoint": "https://hook.example/x"}}
			err = tc.pol.Write(Update, "Subscription", stored, edit, project)
			if tc.secret && err != nil {
				t.Errorf("update by one who sees the secret: %v", err)
			}
			if !tc.secret && (err == nil || fhir.AsError(err).Status != 403) {
				t.Errorf("update by one who does not see the secret: %v, want 403", err)
			}
			if err := tc.pol.Write(Delete, "Subscription", stored, nil, project); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
	}
	// The stored version keeps its secret.
	res, err := r.Read(ctx, repo.Scope{Project: project}, "Subscription", created.ID)
	if err != nil || !strings.Contains(string(res.JSON), "s3cret-value") {
		t.Fatalf("stored: %s %v", res.JSON, err)
	}
}
