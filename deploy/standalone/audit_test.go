package standalone

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
)

// auditEvents are a project's AuditEvents of one of Pinion's kinds (its
// subtype code), as the project's admin searches them.
func auditEvents(t *testing.T, token, kind string, extra ...string) []map[string]any {
	t.Helper()
	// Newest first: a search of the whole server's events (a super
	// admin's) holds many tests' events, and the one a test waits for is
	// among the latest.
	q := url.Values{"subtype": {"https://pinion.health/fhir/CodeSystem/audit-event|" + kind}, "_count": {"100"}, "_sort": {"-date"}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	r := do(t, "GET", "fhir/R4/AuditEvent?"+q.Encode(), token, "", nil)
	expect(t, r, 200)
	_, found := bundleOf(t, r)
	return found
}

// agentOf is an event's requesting agent: who, the name given, the address.
func agentOf(ev map[string]any) (who, name, address string) {
	for _, a := range ev["agent"].([]any) {
		m := a.(map[string]any)
		if m["requestor"] != true {
			continue
		}
		if w, ok := m["who"].(map[string]any); ok {
			who, _ = w["reference"].(string)
		}
		name, _ = m["name"].(string)
		if n, ok := m["network"].(map[string]any); ok {
			address, _ = n["address"].(string)
		}
	}
	return who, name, address
}

// clientAgent is the client application an event's person acted through.
func clientAgent(ev map[string]any) string {
	for _, a := range ev["agent"].([]any) {
		m := a.(map[string]any)
		if m["requestor"] == false {
			if w, ok := m["who"].(map[string]any); ok {
				ref, _ := w["reference"].(string)
				return ref
			}
		}
	}
	return ""
}

// The first events of the audit trail (issue 54): a password sign-in,
// refused and then let in, and a client's token, refused and then
// issued, each leave one AuditEvent the project's admin finds, with who
// (or the address typed), from where, and the outcome; the trail
// verifies whole; and nobody, a super admin included, changes an event.
func TestAuditTrailSignInsAndTokens(t *testing.T) {
	pid, su := adminProject(t, "Audit trail")
	admin := projectAdmin(t, su, pid, "audit-admin@example.com")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ida", "lastName", "Audited",
		"email", "ida-audited@example.com", "password", "ida's password")

	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "ida-audited@example.com", "password": "not ida's password", "projectId": pid}))
	expect(t, r, 400)
	signIn(t, "ida-audited@example.com", "ida's password", pid, "openid")

	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "audited app"}))
	expect(t, r, 201)
	client, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded",
		[]byte(url.Values{"grant_type": {"client_credentials"}, "client_id": {client}, "client_secret": {"wrong"}}.Encode()))
	expect(t, r, 401)
	clientToken(t, client, secret)

	var signIns []map[string]any
	eventually(t, 15*time.Second, "the sign-ins recorded", func() bool {
		signIns = auditEvents(t, admin, "sign-in", "_sort", "date")
		return len(signIns) >= 5 // the admin's, Ida's two, the client's two
	})
	var refused, ida, clientRefused, clientIn bool
	for _, ev := range signIns {
		who, name, address := agentOf(ev)
		ok := ev["outcome"] == "0"
		switch {
		case name == "ida-audited@example.com":
			refused = !ok && ev["outcomeDesc"] == "Email or password is invalid" && who == "" && address == "127.0.0.1"
		case strings.HasPrefix(who, "User/") && ok:
			ida = ev["type"].(map[string]any)["code"] == "110114"
		case who == "" && !ok && clientAgent(ev) == "ClientApplication/"+client:
			clientRefused = strings.HasPrefix(ev["outcomeDesc"].(string), "invalid_client")
		case who == "ClientApplication/"+client && ok:
			clientIn = true
		}
	}
	if !refused || !ida || !clientRefused || !clientIn {
		t.Fatalf("refused %v, let in %v, client refused %v, client let in %v: %v", refused, ida, clientRefused, clientIn, signIns)
	}

	// The trail is whole.
	r = do(t, "GET", "admin/super/audit/verify?project="+pid, su, "", nil)
	expect(t, r, 200)
	// With the key its checkpoints are signed with, to pin.
	if rep := r.json(t); rep["whole"] != true || rep["events"].(float64) < 5 || !strings.HasPrefix(fmt.Sprint(rep["key"]), "ed25519:") {
		t.Fatalf("verify: %s", r.body)
	}
	expect(t, do(t, "GET", "admin/super/audit/verify?project="+pid, admin, "", nil), 403)

	// Nobody changes an event.
	ev := signIns[0]
	id := ev["id"].(string)
	ev["outcome"] = "0"
	for _, r := range []*response{
		do(t, "PUT", "fhir/R4/AuditEvent/"+id, su, "application/fhir+json", mustJSON(ev)),
		do(t, "PATCH", "fhir/R4/AuditEvent/"+id, su, "application/json-patch+json", []byte(`[{"op":"replace","path":"/outcome","value":"0"}]`)),
		do(t, "DELETE", "fhir/R4/AuditEvent/"+id, su, "", nil),
		do(t, "DELETE", "fhir/R4/AuditEvent/"+id, admin, "", nil),
	} {
		if r.status != 403 || !strings.Contains(string(r.body), access.ReadOnlyText) {
			t.Fatalf("a change to an AuditEvent: %d %s", r.status, r.body)
		}
	}
}

// Reads of a patient's record (BALP's Patient privacy pattern): a read, a
// search and a history that return a patient's resources each leave one
// event naming the patient; a read of something that is no patient's, and
// a search that returns nothing, leave none; and a project that turns
// auditReads off records none.
func TestAuditTrailPatientAccess(t *testing.T) {
	pid, su := adminProject(t, "Audited reads")
	admin := projectAdmin(t, su, pid, "reads-admin@example.com")
	create := func(body map[string]any) string {
		t.Helper()
		r := do(t, "POST", "fhir/R4/"+body["resourceType"].(string), admin, "application/fhir+json", mustJSON(body))
		expect(t, r, 201)
		return r.json(t)["id"].(string)
	}
	patient := create(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Audit"}}})
	create(map[string]any{"resourceType": "Observation", "status": "final", "code": map[string]any{"text": "pulse"},
		"subject": map[string]any{"reference": "Patient/" + patient}})
	org := create(map[string]any{"resourceType": "Organization", "name": "No patient's"})

	for _, c := range []struct {
		path  string
		found bool
	}{
		{"fhir/R4/Patient/" + patient, true},
		{"fhir/R4/Observation?subject=Patient/" + patient, true},
		{"fhir/R4/Patient/" + patient + "/_history", true},
		{"fhir/R4/Organization/" + org, false},
		{"fhir/R4/Observation?code:text=nothing-like-this", false},
		{"fhir/R4/Organization?name=No", false},
	} {
		expect(t, do(t, "GET", c.path, admin, "", nil), 200)
	}
	// A super admin's read is in the trail of the project whose record it
	// read, for its admin to see.
	expect(t, do(t, "GET", "fhir/R4/Patient/"+patient, su, "", nil), 200)
	// A GraphQL query that reads the patient twice over: one event.
	r := graphQL(t, admin, `{ Patient(id: "`+patient+`") { id } ObservationList(subject: "Patient/`+patient+`") { id subject { reference } } }`, nil)
	expect(t, r, 200)
	var reads, searches []map[string]any
	eventually(t, 15*time.Second, "the reads recorded", func() bool {
		reads = auditEvents(t, admin, "patient-read", "patient", "Patient/"+patient)
		searches = auditEvents(t, admin, "patient-search", "patient", "Patient/"+patient)
		return len(reads) >= 3 && len(searches) >= 2
	})
	bySuper := 0
	for _, ev := range reads {
		if who, _, _ := agentOf(ev); strings.HasPrefix(who, "ClientApplication/") {
			bySuper++
		}
	}
	if bySuper != 1 {
		t.Fatalf("%d reads by the super admin in the project's trail, want 1", bySuper)
	}
	graphQLEvents := 0
	for _, ev := range searches {
		q, _ := ev["entity"].([]any)[0].(map[string]any)["query"].(string)
		b, _ := base64.StdEncoding.DecodeString(q)
		if strings.HasPrefix(string(b), "$graphql ") {
			graphQLEvents++
		}
	}
	if graphQLEvents != 1 {
		t.Fatalf("%d events for one GraphQL query: %v", graphQLEvents, searches)
	}
	for _, ev := range append(reads, searches...) {
		who, _, address := agentOf(ev)
		if !strings.HasPrefix(who, "User/") && !strings.HasPrefix(who, "ClientApplication/") || address == "" || ev["type"].(map[string]any)["code"] != "rest" {
			t.Fatalf("event: %v", ev)
		}
	}
	if q := searches[0]["entity"].([]any)[0].(map[string]any)["query"]; q == nil {
		t.Fatalf("the search's query entity: %v", searches[0])
	}

	// Reads auditing off: a read leaves nothing. A sign-in after it is a
	// mark: once it is stored, so is anything recorded before it.
	r = do(t, "GET", "fhir/R4/Project/"+pid, su, "", nil)
	expect(t, r, 200)
	project := r.json(t)
	project["setting"] = []any{map[string]any{"name": "auditReads", "valueBoolean": false}}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, admin, "application/fhir+json", mustJSON(project)), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+patient, admin, "", nil), 200)
	before := len(auditEvents(t, admin, "sign-in"))
	projectAdmin(t, su, pid, "reads-mark@example.com")
	eventually(t, 15*time.Second, "the mark recorded", func() bool { return len(auditEvents(t, admin, "sign-in")) > before })

	// Only the reads above are recorded: none for the Organization, the
	// empty search, or the read with auditing off.
	all := auditEvents(t, admin, "patient-read")
	all = append(all, auditEvents(t, admin, "patient-search")...)
	if len(all) != 5 {
		t.Fatalf("%d patient-access events, want 5: %v", len(all), all)
	}
}

// Administration (issue 54's table): each request that changes who may
// do what leaves one event of its kind, naming who did it and on what;
// a refused one, and a write of something else, leave none.
func TestAuditTrailAdministration(t *testing.T) {
	pid, su := adminProject(t, "Audited administration")
	admin := projectAdmin(t, su, pid, "adm-admin@example.com")
	json := "application/json"

	r := do(t, "POST", "admin/projects/"+pid+"/invite", admin, json, mustJSON(map[string]any{
		"resourceType": "Practitioner", "firstName": "Ivy", "lastName": "Vited", "email": "ivy-" + pid + "@example.com"}))
	expect(t, r, 200)
	membership := r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", admin, json, mustJSON(map[string]any{"resourceType": "Practitioner"}))
	expect(t, r, 400) // no e-mail: refused, and not recorded
	r = do(t, "GET", "admin/projects/"+pid+"/members/"+membership, admin, "", nil)
	expect(t, r, 200)
	m := r.json(t)
	m["admin"] = true
	expect(t, do(t, "POST", "admin/projects/"+pid+"/members/"+membership, admin, json, mustJSON(m)), 200)
	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "audited", "resource": []any{map[string]any{"resourceType": "Patient"}}}))
	expect(t, r, 201)
	policy := r.json(t)["id"].(string)
	expect(t, do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{"resourceType": "Patient"})), 201)
	expect(t, do(t, "DELETE", "fhir/R4/AccessPolicy/"+policy, admin, "", nil), 200)
	expect(t, do(t, "DELETE", "admin/projects/"+pid+"/members/"+membership, admin, "", nil), 200)

	want := []struct {
		kind, action, what string
	}{
		{"member-invited", "C", "ProjectMembership/" + membership},
		{"member-changed", "U", "ProjectMembership/" + membership},
		{"security-config-changed", "C", "AccessPolicy/" + policy},
		{"security-config-changed", "D", "AccessPolicy/" + policy},
		{"member-removed", "D", "ProjectMembership/" + membership},
	}
	var got []map[string]any
	eventually(t, 15*time.Second, "the changes recorded", func() bool {
		got = nil
		for _, k := range []string{"member-invited", "member-changed", "security-config-changed", "member-removed"} {
			for _, ev := range auditEvents(t, admin, k, "_sort", "date") {
				// The admin's own, not the super admin's invite of the admin.
				if who, _, _ := agentOf(ev); !strings.HasPrefix(who, "ClientApplication/") {
					got = append(got, ev)
				}
			}
		}
		return len(got) >= len(want)
	})
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %v", len(got), len(want), got)
	}
	for _, w := range want {
		found := false
		for _, ev := range got {
			who, _, _ := agentOf(ev)
			what := ev["entity"].([]any)[0].(map[string]any)["what"].(map[string]any)["reference"]
			codes := ev["subtype"].([]any)
			if codes[len(codes)-1].(map[string]any)["code"] == w.kind && ev["action"] == w.action && what == w.what &&
				strings.HasPrefix(who, "User/") && ev["type"].(map[string]any)["code"] == "110113" {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s %s of %s in %v", w.kind, w.action, w.what, got)
		}
	}
}

// A person's own security events, recorded by route: enrolling a second
// factor, a wrong second factor at sign-in (refused, with why), a token
// revoked and a client's secret rotated.
func TestAuditTrailPersonAndClientEvents(t *testing.T) {
	pid, su := adminProject(t, "Audited factors")
	admin := projectAdmin(t, su, pid, "fac-admin@example.com")
	r := do(t, "GET", "auth/mfa/status", admin, "", nil)
	expect(t, r, 200)
	uri := r.json(t)["enrollUri"].(string)
	expect(t, do(t, "POST", "auth/mfa/enroll", admin, "application/json", mustJSON(map[string]any{"token": totpCode(t, uri, time.Now())})), 200)
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "fac-admin@example.com", "password": "admin password", "scope": "openid", "projectId": pid}))
	expect(t, r, 200)
	login, _ := r.json(t)["login"].(string)
	expect(t, do(t, "POST", "auth/mfa/verify", "", "application/json", mustJSON(map[string]any{"login": login, "token": "000000"})), 400)
	expect(t, do(t, "POST", "oauth2/revoke", "", "application/x-www-form-urlencoded", []byte("token="+admin)), 200)

	// A revocation names no project (the route is public: the token is
	// the credential): it is in the server's own trail.
	check := func(kind, outcome string, where ...string) map[string]any {
		t.Helper()
		var evs []map[string]any
		eventually(t, 15*time.Second, kind+" recorded", func() bool {
			evs = auditEvents(t, su, kind, where...)
			for _, ev := range evs {
				if ev["outcome"] == outcome {
					return true
				}
			}
			return false
		})
		for _, ev := range evs {
			if ev["outcome"] == outcome {
				return ev
			}
		}
		return nil
	}
	if ev := check("mfa-enrolled", "0", "_project", pid); ev["action"] != "C" {
		t.Fatalf("enrolled: %v", ev)
	}
	check("token-revoked", "0")
	// A refused second factor: in the project's trail, naming the person
	// its login was for.
	eventually(t, 15*time.Second, "the refused second factor recorded", func() bool {
		for _, ev := range auditEvents(t, su, "sign-in", "outcome", "4", "_project", pid) {
			ents, _ := ev["entity"].([]any)
			if len(ents) > 0 && ents[0].(map[string]any)["description"] == "POST /auth/mfa/verify" && ev["outcomeDesc"] != nil {
				return true
			}
		}
		return false
	})
}

// Refused bearer tokens: a revoked one lands in its project's trail with
// the person it was issued to, a forged one in the server's own with what
// it claimed; each token at most once a minute, however often it is sent.
func TestAuditTrailRefusedTokens(t *testing.T) {
	pid, su := adminProject(t, "Audited refusals")
	admin := projectAdmin(t, su, pid, "ref-admin@example.com")
	expect(t, do(t, "POST", "oauth2/revoke", "", "application/x-www-form-urlencoded", []byte("token="+admin)), 200)
	claimed := "forged-" + pid
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"x"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"`+claimed+`","exp":4102444800}`)) + ".c2lnbmF0dXJl"
	for range 5 {
		expect(t, do(t, "GET", "fhir/R4/Patient", admin, "", nil), 401)
		expect(t, do(t, "GET", "fhir/R4/Patient", forged, "", nil), 401)
	}
	// Marks: a sign-in to the project, and a refused one of nobody (the
	// server's trail). Once each is stored, so is whatever each trail
	// recorded before it.
	projectAdmin(t, su, pid, "ref-mark@example.com")
	nobody := "nobody-" + pid + "@example.com"
	expect(t, do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{"email": nobody, "password": "not a password"})), 400)
	eventually(t, 15*time.Second, "the marks recorded", func() bool {
		marked, people := 0, 0
		for _, ev := range auditEvents(t, su, "sign-in", "_project", pid) {
			if who, _, _ := agentOf(ev); strings.HasPrefix(who, "User/") {
				people++ // the admin's, then the mark's
			}
		}
		if people >= 2 {
			marked = 1
		}
		for _, ev := range auditEvents(t, su, "sign-in", "outcome", "4", "agent-name:exact", nobody) {
			if _, name, _ := agentOf(ev); name == nobody {
				marked++
				break
			}
		}
		return marked == 2
	})
	revoked := auditEvents(t, su, "token-refused", "_project", pid)
	var forgedEvents []map[string]any
	for _, ev := range auditEvents(t, su, "token-refused", "agent-name:exact", claimed) {
		if _, name, _ := agentOf(ev); name == claimed {
			forgedEvents = append(forgedEvents, ev)
		}
	}
	if len(revoked) != 1 || len(forgedEvents) != 1 {
		t.Fatalf("%d events for the revoked token, %d for the forged one, want one each", len(revoked), len(forgedEvents))
	}
	if who, _, _ := agentOf(revoked[0]); !strings.HasPrefix(who, "User/") || revoked[0]["outcomeDesc"] != "revoked" {
		t.Fatalf("the revoked token's event: %v", revoked[0])
	}
	if who, _, _ := agentOf(forgedEvents[0]); who != "" {
		t.Fatalf("a forged token names nobody for sure: %v", forgedEvents[0])
	}
}

// The rest of issue 54's table, each request and the event it leaves:
// a project founded, its tokens refreshed, a password a super admin set,
// a client's secret rotated, a consent withdrawn (a withdrawal of none
// leaves nothing).
func TestAuditTrailAccountEvents(t *testing.T) {
	suffix := uuid.NewString()[:8]
	email := "audited-" + suffix + "@example.com"
	login, verifier := registered(t, "Audited", email, "a long password", "")
	r := do(t, "POST", "auth/newproject", "", "application/json", mustJSON(map[string]any{"login": login, "projectName": "Audited Founding"}))
	expect(t, r, 200)
	tok := redeemCode(t, r.json(t), verifier)
	pid := strings.TrimPrefix(tok["project"].(map[string]any)["reference"].(string), "Project/")
	access := tok["access_token"].(string)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}}
	expect(t, do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode())), 200)

	r = do(t, "POST", "admin/projects/"+pid+"/client", access, "application/json", mustJSON(map[string]any{"name": "rotated"}))
	expect(t, r, 201)
	client := r.json(t)["id"].(string)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/client/"+client+"/$rotate-secret", access, "application/json", []byte(`{}`)), 200)
	// Last: a password set ends the person's sessions.
	su := superToken(t)
	expect(t, do(t, "POST", "admin/super/setpassword", su, "application/json", mustJSON(map[string]any{
		"email": email, "password": "another long password"})), 200)

	want := []struct{ kind, action, what string }{
		{"project-created", "C", "Project/" + pid},
		{"token-refreshed", "E", "Project/" + pid},
		{"security-config-changed", "C", "ClientApplication/" + client},
		{"secret-rotated", "U", "ClientApplication/" + client},
	}
	for _, w := range want {
		eventually(t, 15*time.Second, w.kind+" recorded", func() bool {
			for _, ev := range auditEvents(t, su, w.kind, "_project", pid) {
				what := ev["entity"].([]any)[0].(map[string]any)["what"].(map[string]any)["reference"]
				if who, _, _ := agentOf(ev); strings.HasPrefix(who, "User/") && ev["action"] == w.action && what == w.what && ev["outcome"] == "0" {
					return true
				}
			}
			return false
		})
	}
	// The super admin's setting of the password: in the super admin's
	// project (the route names none), by the super admin's client.
	eventually(t, 15*time.Second, "password-set recorded", func() bool {
		for _, ev := range auditEvents(t, su, "password-set") {
			if who, _, _ := agentOf(ev); strings.HasPrefix(who, "ClientApplication/") {
				return true
			}
		}
		return false
	})
}
