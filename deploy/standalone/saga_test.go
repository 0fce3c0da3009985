package standalone

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A service that stops in the middle of an invite saga: the HTTP call
// answers 504 with the invite id, and once the service is back the saga
// completes with exactly one user, one profile and one membership.
func TestInviteSurvivesServiceOutage(t *testing.T) {
	for _, svc := range []string{"identity", "fhir"} {
		t.Run(svc, func(t *testing.T) {
			st := ownStack(t, map[string]string{"PINION_REQUEST_TIMEOUT": "3s"})
			pid, su := adminProject(t, "Outage "+svc)

			if err := st.StopService(svc); err != nil {
				t.Fatal(err)
			}
			email := svc + "-outage@example.com"
			r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
				inviteBody("resourceType", "Practitioner", "firstName", "Out", "lastName", "Age", "email", email, "sendEmail", false))
			expect(t, r, 504)
			issue := r.json(t)["issue"].([]any)[0].(map[string]any)
			if d, _ := issue["diagnostics"].(string); !strings.HasPrefix(d, "invite/") {
				t.Fatalf("504 without the invite id: %s", r.body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := st.StartService(ctx, svc); err != nil {
				t.Fatal(err)
			}
			done := waitUntil(30*time.Second, func() bool {
				r = do(t, "GET", "fhir/R4/ProjectMembership?_project="+pid+"&profile-type=Practitioner", su, "", nil)
				expect(t, r, 200)
				e, _ := r.json(t)["entry"].([]any)
				return len(e) == 1
			})
			if !done {
				t.Fatalf("saga did not complete: %s", r.body)
			}
			for _, q := range []string{"User?email=" + email, "Practitioner?email=" + email + "&_project=" + pid} {
				r = do(t, "GET", "fhir/R4/"+q, su, "", nil)
				expect(t, r, 200)
				if e, _ := r.json(t)["entry"].([]any); len(e) != 1 {
					t.Errorf("%s: %d results, want 1: %s", q, len(e), r.body)
				}
			}
			// The same invite again is now a plain conflict.
			r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
				inviteBody("resourceType", "Practitioner", "firstName", "Out", "lastName", "Age", "email", email, "sendEmail", false))
			expect(t, r, 409)
		})
	}
}
