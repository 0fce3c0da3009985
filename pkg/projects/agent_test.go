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
		{"meta", `{"meta":{}}`, "Bot.meta is set by the server", ""},
		{"server-set field", `{"executableCode":{}}`, "Bot.executableCode is set by the server", ""},
		{"a policy", `{"accessPolicy":{"reference":"AccessPolicy/a"}}`, "", "AccessPolicy/a"},
		{"a null policy", `{"accessPolicy":null}`, "", ""},
		{"a policy without reference", `{"accessPolicy":{}}`, "Invalid access policy reference", ""},
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
			if _, ok := res["accessPolicy"]; ok {
				t.Error("accessPolicy left in the resource")
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
