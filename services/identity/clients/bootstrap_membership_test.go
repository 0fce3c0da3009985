package clients

import (
	"encoding/json"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir/resource"
)

// The typed super-admin membership is stored as the map it replaced was
// (issue 31, finding 3).
func TestSuperAdminMembershipJSON(t *testing.T) {
	ref := "ClientApplication/c1"
	old := map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + SuperAdminProjectID, "display": "Super Admin"},
		"user":         map[string]any{"reference": ref, "display": "Super Admin Client"},
		"profile":      map[string]any{"reference": ref, "display": "Super Admin Client"},
		"admin":        true,
	}
	m, err := resource.Map(superAdminMembership(ref))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(m)
	want, _ := json.Marshal(old)
	if string(got) != string(want) {
		t.Fatalf("%s\nwant %s", got, want)
	}
}
