package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/deploy/standalone"
)

// bench holds the stack under test and the data seeded into it.
type bench struct {
	project  string
	base     string
	hc       *httpClient
	super    string
	token    string
	clientID string
	secret   string
	patients []string
	started  time.Time // before the bench loaded its first patient

	// The shapes op's small project beside the bench's, and its client.
	small, smallClient, smallSecret string

	dir                  string // data directory; "" for a remote stack without -data
	db                   string // database name, kept with the data directory
	inProcess            bool   // the stack runs in this process (its memory is ours)
	stack                *standalone.Stack
	superID, superSecret string
	savedSuper           bool // the credentials come from the data directory's superadmin.json
}

func (b *bench) waitReady() {
	for i := 0; i < 600; i++ {
		if b.hc.get(b.base+"readyz", "") == 200 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	fail(fmt.Errorf("stack not ready"))
}

func (b *bench) tokenFor(id, secret string) string {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	st, body := b.hc.do("POST", b.base+"oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	if st != 200 {
		fail(fmt.Errorf("token: %d %s", st, body))
	}
	var t struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.Unmarshal(body, &t)
	return t.AccessToken
}

func (b *bench) mustJSON(method, path, token, ct string, body any, want int) map[string]any {
	raw, _ := json.Marshal(body)
	st, resp := b.hc.do(method, b.base+path, token, ct, raw)
	if st != want {
		fail(fmt.Errorf("%s %s: %d %s", method, path, st, resp))
	}
	var m map[string]any
	_ = json.Unmarshal(resp, &m)
	return m
}

// login takes the super-admin's token, and the bench client's once there is one.
func (b *bench) login() {
	b.super = b.tokenFor(b.superID, b.superSecret)
	if b.clientID != "" {
		b.token = b.tokenFor(b.clientID, b.secret)
	}
}

// seed creates a project, a client in it, and n patients, as docs/PERFORMANCE.md's workload.
func (b *bench) seed(n int) {
	project := map[string]any{"resourceType": "Project", "name": "bench"}
	if !*auditReads {
		// The audit trail's events for reads of patients' records off, as a
		// project chooses (docs/audit.md): the cost of the events is this
		// run against one with them on.
		project["setting"] = []any{map[string]any{"name": "auditReads", "valueBoolean": false}}
	}
	p := b.mustJSON("POST", "admin/Project", b.super, "application/json", project, 201)
	c := b.mustJSON("POST", "admin/projects/"+p["id"].(string)+"/client", b.super, "application/json", map[string]any{"name": "bench client"}, 201)
	b.clientID, b.secret = c["id"].(string), c["secret"].(string)
	b.project = p["id"].(string)
	b.token = b.tokenFor(b.clientID, b.secret)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		r := b.mustJSON("POST", "fhir/R4/Patient", b.token, "application/fhir+json", patientBody(i), 201)
		b.patients = append(b.patients, r["id"].(string))
		if (i+1)%250 == 0 {
			fmt.Printf("  seeded %d/%d patients (%.0f/s)\n", i+1, n, float64(i+1)/time.Since(t0).Seconds())
		}
	}
}

// signers are the members with a password, for the sign-in benchmark: the
// first Practitioners, several, so that each (e-mail, address) pair signs
// in about twice at once, as people do; more at once is a guessing attack
// the sign-in limiter counts before it hashes.
const signers = 8

// signer is the index of the w-th member with a password.
func signer(w, members int) int { return 2*(w%min(signers, max(members/2, 1))) + 1 }

// seedMembers invites n members (half Patients), the first Practitioners
// with a password for the sign-in benchmark.
func (b *bench) seedMembers(n int) {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		typ := "Practitioner"
		if i%2 == 0 {
			typ = "Patient"
		}
		body := map[string]any{"resourceType": typ, "firstName": "Member", "lastName": fmt.Sprint(i),
			"email": fmt.Sprintf("member%d@bench.example", i), "sendEmail": false}
		if i%2 == 1 && i < 2*signers {
			body["password"] = "bench password"
		}
		b.mustJSON("POST", "admin/projects/"+b.project+"/invite", b.super, "application/json", body, 200)
	}
	fmt.Printf("  seeded %d members (%.0f invites/s)\n", n, float64(n)/time.Since(t0).Seconds())
}

// newBot creates a bot in the bench project and deploys its code.
func (b *bench) newBot(name, identifier, code string) string {
	body := map[string]any{"name": name}
	if identifier != "" {
		sys, val, _ := strings.Cut(identifier, "|")
		body["identifier"] = []any{map[string]any{"system": sys, "value": val}}
	}
	bot := b.mustJSON("POST", "admin/projects/"+b.project+"/bot", b.super, "application/json", body, 201)
	id := bot["id"].(string)
	b.mustJSON("POST", "fhir/R4/Bot/"+id+"/$deploy", b.super, "application/json", map[string]any{"code": code, "filename": name + ".js"}, 200)
	return id
}

func (b *bench) run() {
	c := *clients
	if wanted("token") {
		form := []byte(url.Values{"grant_type": {"client_credentials"}, "client_id": {b.clientID}, "client_secret": {b.secret}}.Encode())
		drive("POST /oauth2/token (client credentials)", c, func(int, int) bool {
			st, _ := b.hc.do("POST", b.base+"oauth2/token", "", "application/x-www-form-urlencoded", form)
			return st == 200
		})
	}
	// The ops that grow the store come first: searches and updates are
	// measured after the creates, never before (docs/PERFORMANCE.md), on a
	// store that only grows, as users' do.
	size := storeSize(len(b.patients))
	b.creates(size)
	if wanted("invite") {
		drive("POST admin/projects/<id>/invite", c, func(w, i int) bool {
			body, _ := json.Marshal(map[string]any{"resourceType": "Practitioner", "firstName": "Load", "lastName": "Test",
				"email": fmt.Sprintf("load-%d-%d-%d@bench.example", time.Now().UnixNano()%1e6, w, i), "sendEmail": false})
			st, _ := b.hc.do("POST", b.base+"admin/projects/"+b.project+"/invite", b.super, "application/json", body)
			return st == 200
		})
	}
	if wanted("livez") {
		// The floor: the server's cheapest answer (the gateway's liveness,
		// no bus, no store), whose p99 ÷ p50 is what scheduling alone
		// costs at this load on this machine.
		drive("GET livez", c, func(int, int) bool { return b.hc.get(b.base+"livez", "") == 200 })
		drive("GET livez (1 client)", 1, func(int, int) bool { return b.hc.get(b.base+"livez", "") == 200 })
	}
	if wanted("read") {
		many := drive("GET Patient/<id>", c, func(w, i int) bool {
			return b.hc.get(b.base+"fhir/R4/Patient/"+b.patients[(w*7919+i)%len(b.patients)], b.token) == 200
		})
		one := drive("GET Patient/<id> (1 client)", 1, func(w, i int) bool {
			return b.hc.get(b.base+"fhir/R4/Patient/"+b.patients[i%len(b.patients)], b.token) == 200
		})
		nearLimit(many, one)
	}
	if wanted("search") {
		drive("GET Patient?name=<prefix>&_count=20", c, func(w, i int) bool {
			return b.hc.get(b.base+"fhir/R4/Patient?_count=20&name="+namePrefixes[(w+i)%len(namePrefixes)], b.token) == 200
		})
	}
	b.updates(size)
	if wanted("members") {
		drive("GET ProjectMembership?profile-type=Patient&_count=20", c, func(int, int) bool {
			return b.hc.get(b.base+"fhir/R4/ProjectMembership?profile-type=Patient&_count=20", b.super) == 200
		})
	}
	if wanted("signin") {
		drive("POST auth/login + oauth2/token", c, func(w, _ int) bool {
			login, _ := json.Marshal(map[string]any{"email": fmt.Sprintf("member%d@bench.example", signer(w, *membersN)), "password": "bench password",
				"codeChallenge": "bench-verifier-0123456789012345678901234567890", "codeChallengeMethod": "plain"})
			st, body := b.hc.do("POST", b.base+"auth/login", "", "application/json", login)
			if st != 200 {
				return false
			}
			var l struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(body, &l)
			form := url.Values{"grant_type": {"authorization_code"}, "code": {l.Code}, "code_verifier": {"bench-verifier-0123456789012345678901234567890"}}
			st, _ = b.hc.do("POST", b.base+"oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
			return st == 200
		})
	}
	b.bots(size)
	if wanted("subscriptions") {
		b.subscriptions()
	}
	if wanted("costly-criteria") {
		b.costlyCriteria()
	}
	if wanted("export") {
		b.export()
	}
	if wanted("fair-writes") {
		b.fairWrites()
	}
	if wanted("shapes") {
		b.shapesAfter()
	}
	if wanted("admin") {
		drive("POST admin/projects/<id>/client", c, func(w, i int) bool {
			st, _ := b.hc.do("POST", b.base+"admin/projects/"+b.project+"/client", b.super, "application/json",
				[]byte(fmt.Sprintf(`{"name":"bench client %d-%d"}`, w, i)))
			return st == 201
		})
		// Each worker rotates its own client, naming the secret it last got.
		ids, secrets := make([]string, c), make([]string, c)
		for w := range ids {
			cl := b.mustJSON("POST", "admin/projects/"+b.project+"/client", b.super, "application/json", map[string]any{"name": "rotating"}, 201)
			ids[w], secrets[w] = cl["id"].(string), cl["secret"].(string)
		}
		drive("POST ClientApplication/<id>/$rotate-secret", c, func(w, i int) bool {
			st, body := b.hc.do("POST", b.base+"fhir/R4/ClientApplication/"+ids[w]+"/$rotate-secret", b.super, "application/json",
				[]byte(`{"secret":"`+secrets[w]+`"}`))
			var out struct {
				Secret string `json:"secret"`
			}
			if st != 200 || json.Unmarshal(body, &out) != nil {
				return false
			}
			secrets[w] = out.Secret
			return true
		})
		drive("POST admin/projects/<id>/secrets (1 client)", 1, func(w, i int) bool {
			st, _ := b.hc.do("POST", b.base+"admin/projects/"+b.project+"/secrets", b.super, "application/json",
				[]byte(fmt.Sprintf(`[{"name":"KEY","valueString":"value-%d"}]`, i)))
			return st == 200
		})
	}
}

// export times a Bulk Data export of every Patient of the project, from
// the kick-off to the manifest, then downloads its files: the export runs
// in the background, alone, so one run is the measure.
func (b *bench) export() {
	t0 := time.Now()
	st, body := b.hc.do("POST", b.base+"fhir/R4/$export?_type=Patient", b.token, "", nil)
	var accepted struct {
		Issue []struct {
			Diagnostics string `json:"diagnostics"`
		} `json:"issue"`
	}
	if st != 202 || json.Unmarshal(body, &accepted) != nil || len(accepted.Issue) == 0 {
		fail(fmt.Errorf("export kick-off: %d %s", st, body))
	}
	status := accepted.Issue[0].Diagnostics
	var manifest struct {
		Output []struct {
			URL   string `json:"url"`
			Count int    `json:"count"`
		} `json:"output"`
	}
	for {
		st, body = b.hc.do("GET", status, b.token, "", nil)
		if st == 200 {
			if err := json.Unmarshal(body, &manifest); err != nil {
				fail(fmt.Errorf("export manifest: %w", err))
			}
			break
		}
		if st != 202 {
			fail(fmt.Errorf("export status: %d %s", st, body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(t0)
	n, size := 0, 0
	t1 := time.Now()
	for _, f := range manifest.Output {
		n += f.Count
		st, body := b.hc.do("GET", f.URL, b.token, "", nil)
		if st != 200 {
			fail(fmt.Errorf("export file: %d", st))
		}
		size += len(body)
	}
	fmt.Printf("%-44s %9.0f res/s  %d Patients in %d files in %.1f s; downloads %.1f MiB in %.1f s\n",
		"bulk export of every Patient", float64(n)/took.Seconds(), n, len(manifest.Output), took.Seconds(),
		float64(size)/(1<<20), time.Since(t1).Seconds())
}
