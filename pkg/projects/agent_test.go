package projects

import (
	"errors"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func TestAgentBody(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // the 400's text, "" for none
		policy     string
	}{
		{"named", `{"name":"x"}`, "", ""},
		{"typed", `{"resourceType":"Bot","name":"x"}`, "", ""},
		{"another type", `{"resourceType":"Patient"}`, "Incorrect resource type", ""},
		{"id", `{"id":"mine"}`, "Bot.id is set by the server", ""},
		{"meta", `{"meta":{"versionId":"1"}}`, "Bot.meta is set by the server", ""},
		{"server-set field", `{"executableCode":{"url":"Binary/1"}}`, "Bot.executableCode is set by the server", ""},
		// Forms send blank fields: absent, as Medplum reads them.
		{"empty meta", `{"name":"x","meta":{}}`, "", ""},
		{"empty server-set field", `{"name":"x","executableCode":{}}`, "", ""},
		{"blank fields", `{"name":"x","description":"","redirectUri":""}`, "", ""},
		{"a policy", `{"accessPolicy":{"reference":"AccessPolicy/a"}}`, "", "AccessPolicy/a"},
		{"a null policy", `{"accessPolicy":null}`, "", ""},
		{"an empty policy", `{"accessPolicy":{}}`, "", ""},
		{"a policy with a blank reference", `{"accessPolicy":{"reference":"","display":"p"}}`, "Invalid access policy reference", ""},
		{"a policy that is a string", `{"accessPolicy":"AccessPolicy/a"}`, "Invalid access policy reference", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, policy, err := agentBody([]byte(c.body), "Bot", "executableCode")
			if c.want != "" {
				if !errors.Is(err, fhir.ErrBadRequest) || fhir.AsError(err).Message() != c.want {
					t.Fatalf("%v, want 400 %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res["resourceType"] != "Bot" {
				t.Errorf("resourceType %v", res["resourceType"])
			}
			for _, f := range []string{"accessPolicy", "meta", "executableCode", "description", "redirectUri"} {
				if _, ok := res[f]; ok {
					t.Errorf("%s left in the resource", f)
				}
			}
			got := ""
			if policy != nil {
				got = policy.Reference
			}
			if got != c.policy {
				t.Errorf("policy %q, want %q", got, c.policy)
			}
		})
	}
	if _, _, err := agentBody([]byte(`{"name":`), "Bot"); !errors.Is(err, fhir.ErrBadRequest) {
		t.Errorf("bad JSON: %v, want 400", err)
	}
}
