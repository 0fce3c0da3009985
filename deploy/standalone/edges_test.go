package standalone

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/dirlock"
	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

// Fields of meta that only the server sets are dropped on every write
// path, a JSON Patch included.
func TestServerMetaOnPatch(t *testing.T) {
	_, tok := project(t, "meta by patch")
	r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Meta"))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	r = do(t, "PATCH", "fhir/R4/Patient/"+id, tok, "application/json-patch+json", []byte(`[
		{"op":"add","path":"/meta/account","value":{"reference":"Organization/forged"}},
		{"op":"add","path":"/meta/compartment","value":[{"reference":"Patient/forged"}]},
		{"op":"add","path":"/meta/accounts","value":[{"reference":"Organization/forged"}]},
		{"op":"add","path":"/active","value":true}]`))
	expect(t, r, 200)
	for _, body := range []map[string]any{r.json(t), do(t, "GET", "fhir/R4/Patient/"+id, tok, "", nil).json(t)} {
		meta := body["meta"].(map[string]any)
		for _, k := range []string{"account", "accounts", "compartment"} {
			if _, ok := meta[k]; ok {
				t.Fatalf("meta.%s stored through a patch: %v", k, meta)
			}
		}
		if body["active"] != true {
			t.Fatalf("the rest of the patch was lost: %v", body)
		}
	}
}

// A search, sort or condition on a field the caller's policy hides would
// reveal it: refused with 400 naming the parameter.
func TestSearchOnHiddenFields(t *testing.T) {
	pid, su := adminProject(t, "hidden search")
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "no birth dates", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate", "identifier"}}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{
		"name": "restricted", "accessPolicy": map[string]any{"reference": policy}}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	p := mustJSON(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Hidden"}},
		"birthDate": "1980-01-01", "identifier": []any{map[string]any{"system": "urn:x", "value": "secret-id"}}})
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", p), 201)

	refused := []struct{ query, param string }{
		{"birthdate=lt1990-01-01", "birthdate"},
		{"birthdate:missing=false", "birthdate"},
		{"identifier=urn:x|secret-id", "identifier"},
		{"name=Hidden&_sort=birthdate", "_sort"},
		{"_sort=-birthdate", "_sort"},
	}
	for _, tc := range refused {
		r := do(t, "GET", "fhir/R4/Patient?"+tc.query, tok, "", nil)
		expectOutcome(t, r, 400, "hidden by your access policy", tc.param)
	}
	// A condition reveals as much as a search.
	r = do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", p, "If-None-Exist", "birthdate=1980-01-01")
	expectOutcome(t, r, 400, "hidden by your access policy", "birthdate")
	// Searching on what the caller may see still works, without the hidden fields.
	r = do(t, "GET", "fhir/R4/Patient?name=Hidden&_sort=name", tok, "", nil)
	expect(t, r, 200)
	if strings.Contains(string(r.body), "1980") || strings.Contains(string(r.body), "secret-id") || !strings.Contains(string(r.body), "Hidden") {
		t.Fatalf("search answer: %s", r.body)
	}
}

// Whatever way a membership or client application is ended, its tokens
// stop on the very next request and no new one is issued.
func TestEndedMembershipsEndTokens(t *testing.T) {
	pid, su := adminProject(t, "ending tokens")
	newClient := func(name string) (id, secret, token string) {
		r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name}))
		expect(t, r, 201)
		id, secret = r.json(t)["id"].(string), r.json(t)["secret"].(string)
		return id, secret, clientToken(t, id, secret)
	}
	membershipOf := func(clientID string) map[string]any {
		r := do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+clientID, su, "", nil)
		expect(t, r, 200)
		return r.json(t)["entry"].([]any)[0].(map[string]any)["resource"].(map[string]any)
	}
	grant := func(id, secret string) *response {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
		return do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	}

	t.Run("deactivated through PUT", func(t *testing.T) {
		id, secret, tok := newClient("deactivated")
		m := membershipOf(id)
		m["active"] = false
		expect(t, do(t, "PUT", "fhir/R4/ProjectMembership/"+m["id"].(string), su, "application/fhir+json", mustJSON(m)), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
		r := grant(id, secret)
		expect(t, r, 400)
		if r.json(t)["error_description"] != "Profile not active" {
			t.Fatalf("grant for an inactive membership: %s", r.body)
		}
		// And back.
		m = membershipOf(id)
		m["active"] = true
		expect(t, do(t, "PUT", "fhir/R4/ProjectMembership/"+m["id"].(string), su, "application/fhir+json", mustJSON(m)), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient", clientToken(t, id, secret), "", nil), 200)
	})
	t.Run("deactivated in a batch", func(t *testing.T) {
		_, _, tok := newClient("batched")
		m := membershipOf(idOfToken(t, tok))
		m["active"] = false
		bundle := mustJSON(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": []any{map[string]any{
			"request": map[string]any{"method": "PUT", "url": "ProjectMembership/" + m["id"].(string)}, "resource": m}}})
		expect(t, do(t, "POST", "fhir/R4", su, "application/fhir+json", bundle), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
	})
	t.Run("membership deleted", func(t *testing.T) {
		id, secret, tok := newClient("unmembered")
		expect(t, do(t, "DELETE", "fhir/R4/ProjectMembership/"+membershipOf(id)["id"].(string), su, "", nil), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
		expect(t, grant(id, secret), 401)
	})
	t.Run("client deleted", func(t *testing.T) {
		id, secret, tok := newClient("deleted")
		expect(t, do(t, "DELETE", "fhir/R4/ClientApplication/"+id, su, "", nil), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
		r := grant(id, secret)
		expect(t, r, 401)
		if r.json(t)["error_description"] != "Invalid client" {
			t.Fatalf("grant for a deleted client: %s", r.body)
		}
		r = do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+id, su, "", nil)
		expect(t, r, 200)
		if r.json(t)["entry"] != nil {
			t.Fatalf("the deleted client's membership is left: %s", r.body)
		}
	})
}

// idOfToken is the client id a client-credentials token names.
func idOfToken(t *testing.T, tok string) string {
	t.Helper()
	r := do(t, "GET", "auth/me", tok, "", nil)
	expect(t, r, 200)
	return r.json(t)["profile"].(map[string]any)["id"].(string)
}

// resetLinks are the set-password links mailed to an address, oldest first.
func resetLinks(t *testing.T, addr string, want int) [][]string {
	t.Helper()
	type mailed struct {
		at   time.Time
		link []string
	}
	var found []mailed
	mailedEnough := waitUntil(15*time.Second, func() bool {
		files, _ := filepath.Glob(filepath.Join(dataDir, "mail", "*.eml"))
		found = nil
		for _, f := range files {
			b, err := os.ReadFile(f)
			fi, err2 := os.Stat(f)
			if err != nil || err2 != nil || !strings.Contains(string(b), "<"+addr+">") {
				continue
			}
			if m := setPasswordLink.FindStringSubmatch(strings.ReplaceAll(string(b), "=\r\n", "")); m != nil {
				found = append(found, mailed{fi.ModTime(), m[1:]})
			}
		}
		return len(found) >= want
	})
	if !mailedEnough {
		t.Fatalf("%d set-password e-mails to %s, want %d", len(found), addr, want)
	}
	slices.SortFunc(found, func(a, b mailed) int { return a.at.Compare(b.at) })
	var out [][]string
	for _, m := range found {
		out = append(out, m.link)
	}
	return out
}

// A password reset ends every sign-in made with the old password, refresh
// tokens included. A second reset within a minute is answered alike but
// mails nothing and spends nothing: the first link still works, once.
func TestPasswordResetEndsSessions(t *testing.T) {
	pid, su := adminProject(t, "password reset")
	const email = "reset-ends@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Re", "lastName", "Set",
		"email", email, "password", "the old password")
	old := signIn(t, email, "the old password", pid, "openid offline_access")
	access, refresh := old["access_token"].(string), old["refresh_token"].(string)
	expect(t, do(t, "GET", "auth/me", access, "", nil), 200)

	expect(t, do(t, "POST", "auth/resetpassword", "", "application/json", mustJSON(map[string]any{"email": email})), 200)
	links := resetLinks(t, email, 1)
	expect(t, do(t, "POST", "auth/resetpassword", "", "application/json", mustJSON(map[string]any{"email": email})), 200)
	set := func(link []string) *response {
		return do(t, "POST", "auth/setpassword", "", "application/json", mustJSON(map[string]any{"id": link[0], "secret": link[1], "password": "the new password"}))
	}
	expect(t, set(links[0]), 200)
	expectOutcome(t, set(links[0]), 400, "Already used")

	expect(t, do(t, "GET", "auth/me", access, "", nil), 401)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 400)
	if r.json(t)["error"] != "invalid_grant" {
		t.Fatalf("refresh after the reset: %s", r.body)
	}
	fresh := signIn(t, email, "the new password", pid, "openid")
	expect(t, do(t, "GET", "auth/me", fresh["access_token"].(string), "", nil), 200)
}

// An access policy's ipAccessRule holds at sign-in, at the token endpoint
// and on every request, and follows edits of the policy.
func TestIPAccessRules(t *testing.T) {
	parallelIn(t, ownStacks)
	parallelStack(t, map[string]string{"PINION_TRUSTED_PROXIES": "127.0.0.1"})
	pid, su := adminProject(t, "ip rules")
	policy := map[string]any{
		"resourceType": "AccessPolicy", "name": "office only", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Patient"}},
		"ipAccessRule": []any{
			map[string]any{"name": "office", "value": "203.0.113.", "action": "allow"},
			map[string]any{"name": "lab", "value": "192.0.2.0/24", "action": "allow"},
			map[string]any{"name": "everyone else", "value": "*", "action": "block"},
		},
	}
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(policy))
	expect(t, r, 201)
	policy = r.json(t)
	ref := map[string]any{"reference": "AccessPolicy/" + policy["id"].(string)}
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "office app", "accessPolicy": ref}))
	expect(t, r, 201)
	clientID, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Off", "lastName", "Ice",
		"email", "office@example.com", "password", "office password", "membership", map[string]any{"accessPolicy": ref})

	grant := func(from string) *response {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {clientID}, "client_secret": {secret}}
		return do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()), "X-Forwarded-For", from)
	}
	r = grant("198.51.100.1")
	expect(t, r, 400)
	if r.json(t)["error_description"] != "IP address not allowed" {
		t.Fatalf("grant from a blocked address: %s", r.body)
	}
	r = grant("203.0.113.5")
	expect(t, r, 200)
	tok := r.json(t)["access_token"].(string)
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil, "X-Forwarded-For", "203.0.113.5"), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil, "X-Forwarded-For", "192.0.2.77"), 200)
	expectOutcome(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil, "X-Forwarded-For", "198.51.100.1"), 403, "IP address not allowed")

	login := func(from string) *response {
		return do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
			"email": "office@example.com", "password": "office password", "codeChallenge": "x", "codeChallengeMethod": "plain"}),
			"X-Forwarded-For", from)
	}
	expectOutcome(t, login("198.51.100.1"), 400, "IP address not allowed")
	expect(t, login("203.0.113.9"), 200)

	// The policy drops its block: the token works from anywhere at once.
	policy["ipAccessRule"] = policy["ipAccessRule"].([]any)[:2]
	expect(t, do(t, "PUT", "fhir/R4/AccessPolicy/"+policy["id"].(string), su, "application/fhir+json", mustJSON(policy)), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil, "X-Forwarded-For", "198.51.100.1"), 200)
}

// The embedded servers listen where no other local user can reach them:
// the SQLite store is a file only this user may open, NATS is in-process,
// or, when asked to listen, only for Pinion's per-process users, and an
// embedded FerretDB listens on a Unix socket only this user may open.
func TestLocalListeners(t *testing.T) {
	if stack.ferret != nil {
		t.Fatal("the default stack runs a FerretDB")
	}
	modes := func(want map[string]os.FileMode) {
		t.Helper()
		for path, mode := range want {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), mode)
			}
		}
	}
	modes(map[string]os.FileMode{filepath.Join(dataDir, "pinion.db"): 0o600, filepath.Join(dataDir, "pinion.db-wal"): 0o600})
	if addr := stack.ns.Addr(); addr != nil {
		t.Errorf("the embedded NATS listens on %v", addr)
	}

	natsAddr, data := loopback.FreeAddr(t), t.TempDir()
	ownStack(t, map[string]string{"PINION_NATS_LISTEN": natsAddr, "PINION_DATA_DIR": data, "PINION_STORE": "ferretdb"})
	_, tok := project(t, "listening")
	sock := filepath.Join(data, "db", "run", "ferretdb.sock")
	modes(map[string]os.FileMode{sock: 0o600, filepath.Dir(sock): 0o700})
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 200) // the stack itself still works
	if nc, err := nats.Connect("nats://" + natsAddr); err == nil {
		nc.Close()
		t.Fatal("the listening NATS accepted an anonymous connection")
	}
	urls := natsURLs(t, data, natsAddr) // the passwords the stack made
	nc, err := nats.Connect(urls["identity"], nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forged := bus.EncodeRequest(bus.SubjectOf("GET", "/fhir/R4/:type"), &bus.Request{Method: "GET", Path: "/fhir/R4/Patient",
		Params: map[string]string{"type": "Patient"}, Principal: &bus.Principal{SuperAdmin: true, Project: "x"}})
	if _, err := nc.RequestMsg(forged, time.Second); err == nil {
		t.Fatal("a service's user sent a request with a forged principal")
	}
}

// A second stack on a data directory in use refuses at once, naming the
// process that holds it.
func TestOneProcessPerDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Start(ctx, testConfig(dataDir, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		st.Close()
		t.Fatal("a second stack started on the same data directory")
	}
	var held *dirlock.HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Fatalf("error %v, want the directory held by pid %d", err, os.Getpid())
	}
	if !strings.Contains(err.Error(), "in use by") || !strings.Contains(err.Error(), "PINION_DATA_DIR") {
		t.Errorf("message %q does not say what to do", err)
	}
	// The running stack still works.
	expect(t, do(t, "GET", "healthcheck", "", "", nil), 200)
}

// A data directory written by the earlier default store, FerretDB, is not
// silently replaced by an empty SQLite store.
func TestFerretDataIsNotHidden(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Start(ctx, testConfig(dir, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		st.Close()
		t.Fatal("started an empty SQLite store beside FerretDB data")
	}
	if !strings.Contains(err.Error(), "PINION_DATA_DIR") || !strings.Contains(err.Error(), "transaction Bundle") {
		t.Errorf("message %q does not say how to move the data", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pinion.db")); err == nil {
		t.Error("a SQLite store was created anyway")
	}
}
