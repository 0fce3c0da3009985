package standalone

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/subscription"
)

// A Subscription's secret is read by admins and its author only.
func TestSubscriptionSecretShownToAuthor(t *testing.T) {
	pid, su := adminProject(t, "Subscription secrets")
	admin := projectAdmin(t, su, pid, "secret-admin@example.com")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Sam", "lastName", "Subscriber",
		"email", "secret-member@example.com", "password", "member password")
	plain := signIn(t, "secret-member@example.com", "member password", pid, "openid")["access_token"].(string)
	sub := func(secret string) []byte {
		return mustJSON(map[string]any{"resourceType": "Subscription", "status": "active", "reason": "test", "criteria": "Patient?name=nobody-at-all",
			"channel":   map[string]any{"type": "rest-hook", "endpoint": "https://hook.example/x"},
			"extension": []any{map[string]any{"url": subscription.ExtSecret, "valueString": secret}}})
	}
	r := do(t, "POST", "fhir/R4/Subscription", admin, "application/fhir+json", sub("admins-secret"))
	expect(t, r, 201)
	adminsID := r.json(t)["id"].(string)
	r = do(t, "POST", "fhir/R4/Subscription", plain, "application/fhir+json", sub("members-secret"))
	expect(t, r, 201)
	if !strings.Contains(string(r.body), "members-secret") {
		t.Fatalf("the author does not see their secret: %s", r.body)
	}
	membersID := r.json(t)["id"].(string)

	shows := func(token, path, secret string) bool {
		t.Helper()
		r := do(t, "GET", path, token, "", nil)
		expect(t, r, 200)
		return strings.Contains(string(r.body), secret)
	}
	for _, path := range []string{"fhir/R4/Subscription/" + adminsID, "fhir/R4/Subscription?_id=" + adminsID, "fhir/R4/Subscription/" + adminsID + "/_history"} {
		if shows(plain, path, "admins-secret") {
			t.Errorf("%s: a member reads the admin's secret", path)
		}
		if !shows(admin, path, "admins-secret") {
			t.Errorf("%s: the admin does not read their secret", path)
		}
	}
	if !shows(plain, "fhir/R4/Subscription/"+membersID, "members-secret") || !shows(admin, "fhir/R4/Subscription/"+membersID, "members-secret") {
		t.Error("the author or the admin does not read the member's secret")
	}
}
