package standalone

import (
	"strings"
	"testing"
	"time"
)

func TestRotateSecretAndProjectSecrets(t *testing.T) {
	pid, su := adminProject(t, "Secrets")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "rotating"}))
	expect(t, r, 201)
	id, old := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", su, "application/json", nil)
	expect(t, r, 200)
	fresh := r.json(t)["secret"].(string)
	if fresh == "" || fresh == old {
		t.Fatalf("rotation: %s", r.body)
	}
	clientToken(t, id, fresh)
	clientToken(t, id, old) // the retiring secret works for its grace period
	_, member := project(t, "rotation outsider")
	expect(t, do(t, "POST", "admin/projects/"+pid+"/client/"+id+"/$rotate-secret", member, "application/json", nil), 403)

	// Project secrets reach bots as event.secrets and never their audit log.
	r = do(t, "POST", "admin/projects/"+pid+"/secrets", su, "application/json",
		[]byte(`[{"name":"API_KEY","valueString":"sk-very-secret-value"},{"name":"FLAG","valueBoolean":true}]`))
	expect(t, r, 200)
	for _, bad := range []string{`{"name":"x"}`, `[{"valueString":"x"}]`, `[{"name":"a","valueString":"x","valueBoolean":true}]`, `[{"name":"a","valueString":"1"},{"name":"a","valueString":"2"}]`} {
		expect(t, do(t, "POST", "admin/projects/"+pid+"/secrets", su, "application/json", []byte(bad)), 400)
	}
	bot := newBot(t, su, pid, "secretive", "", `exports.handler = async (m, e) => { console.log('key is ' + e.secrets.API_KEY.valueString); return e.secrets.FLAG.valueBoolean; };`, "s.js")
	r = do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", su, "text/plain", []byte("x"))
	expect(t, r, 200)
	if string(r.body) != "true" {
		t.Fatalf("bot saw secrets: %s", r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = do(t, "GET", "fhir/R4/AuditEvent?_project="+pid, su, "", nil)
		expect(t, r, 200)
		if strings.Contains(string(r.body), "key is") {
			if strings.Contains(string(r.body), "sk-very-secret-value") {
				t.Fatal("the audit event shows the secret")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit event: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
