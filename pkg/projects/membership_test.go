package projects

import (
	"encoding/json"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
)

// The typed memberships are stored as the maps they replaced were (issue
// 31, finding 3): the same JSON once the repository's check has dropped
// empty values.
func TestMembershipJSON(t *testing.T) {
	p := &Info{ID: "p1", Name: "Clinic"}
	project := map[string]any{"reference": "Project/p1", "display": "Clinic"}
	for _, tc := range []struct {
		name string
		pm   *resource.ProjectMembership
		want map[string]any
	}{
		{"agent", agentMembership(p, "Bot/b1", "echo", Agent{}), map[string]any{
			"resourceType": "ProjectMembership", "project": project,
			"user":    map[string]any{"reference": "Bot/b1", "display": "echo"},
			"profile": map[string]any{"reference": "Bot/b1", "display": "echo"},
			"admin":   false,
		}},
		{"agent with a policy, added by an admin, unnamed", agentMembership(p, "ClientApplication/c1", "",
			Agent{Policy: &fhir.Reference{Reference: "AccessPolicy/a1"}, InvitedBy: "User/u1"}), map[string]any{
			"resourceType": "ProjectMembership", "project": project,
			"user":         map[string]any{"reference": "ClientApplication/c1", "display": ""},
			"profile":      map[string]any{"reference": "ClientApplication/c1", "display": ""},
			"admin":        false,
			"accessPolicy": map[string]any{"reference": "AccessPolicy/a1"},
			"invitedBy":    map[string]any{"reference": "User/u1"},
		}},
		{"member", memberMembership("p1", "Clinic", Person{User: "User/u2", ProfileType: "Practitioner"}, "Practitioner/pr1"), map[string]any{
			"resourceType": "ProjectMembership", "project": project,
			"user":    map[string]any{"reference": "User/u2"},
			"profile": map[string]any{"reference": "Practitioner/pr1"},
		}},
		{"admin member with a policy", memberMembership("p1", "Clinic",
			Person{User: "User/u2", ProfileType: "Patient", Admin: true, AccessPolicy: "AccessPolicy/a2", InvitedBy: "User/u1"}, "Patient/pt1"), map[string]any{
			"resourceType": "ProjectMembership", "project": project,
			"user":         map[string]any{"reference": "User/u2"},
			"profile":      map[string]any{"reference": "Patient/pt1"},
			"admin":        true,
			"accessPolicy": map[string]any{"reference": "AccessPolicy/a2"},
			"invitedBy":    map[string]any{"reference": "User/u1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := resource.Map(tc.pm)
			if err != nil {
				t.Fatal(err)
			}
			fhir.DropEmpty(m)
			fhir.DropEmpty(tc.want)
			got, _ := json.Marshal(m)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Fatalf("%s\nwant %s", got, want)
			}
		})
	}
}
