package standalone

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// The suite runs against one real stack: embedded NATS and the SQLite
// store, every service, and the gateway on a loopback port, started once in
// TestMain.
//
// Sharing it, and running in parallel (make test's longest package, so its
// time is CI's): a test that only makes its own projects, clients and
// people (names and e-mails carrying the project id) and reads only what
// it made calls t.Parallel() first; Go runs these together once the
// sequential tests are done. A test stays sequential when it swaps base
// (ownStack, ownStackLogging), counts or watches what the whole stack does
// (a bucket's traffic, the delivery workers, the async-execution bound),
// measures time or latency, or fills a shared pool. A test running
// Chromium or Medplum's CLI calls parallelIn(t, browsers) instead; one
// needing settings of its own parallelIn(t, ownStacks) and parallelStack
// rather than ownStack (unless it reads base itself, or races a short
// PINION_REQUEST_TIMEOUT); one starting processes parallelIn(t,
// processStacks) with useBase for its server's URL (see parallel_test.go).
// -parallel defaults to 16 here.
var (
	base    string
	stack   *Stack
	dataDir string
	saID    = "pinion-test-superadmin"
	saSec   = strings.Repeat("s3cr3t-", 6)
	client  = &http.Client{Timeout: 30 * time.Second}
)

func testConfig(dir string, extra map[string]string) *config.Config {
	env := map[string]string{
		"PINION_ADDR":                     "127.0.0.1:0",
		"PINION_DATA_DIR":                 dir,
		"PINION_SUPERADMIN_CLIENT_ID":     saID,
		"PINION_SUPERADMIN_CLIENT_SECRET": saSec,
		"PINION_AUTH_RATE_LIMIT":          "0",
		"PINION_MAX_BODY_BYTES":           "65536",
		"PINION_LOG_LEVEL":                "warn",
	}
	for k, v := range extra {
		env[k] = v
	}
	cfg, err := config.LoadFrom(func(k string) string { return env[k] })
	if err != nil {
		panic(err)
	}
	return cfg
}

func TestMain(m *testing.M) {
	// The stack runs bots in workers started from this test binary.
	worker.MainIfWorker()
	flag.Parse()
	raiseParallel()
	dir, err := os.MkdirTemp("", "pinion-stack-")
	if err != nil {
		panic(err)
	}
	dataDir = dir
	// Rest-hook tests post to servers on loopback.
	cfg := testConfig(dir, map[string]string{"PINION_REST_HOOK_ALLOW_PRIVATE": "true"})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	stack, err = Start(ctx, cfg, log)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start stack:", err)
		os.Exit(1)
	}
	// The base URL in tokens is the configured one; requests go to the real port.
	base = "http://" + stack.Addr + "/"
	waitReady()
	code := m.Run()
	stack.Close()
	os.RemoveAll(dir)
	removeBinaries()
	os.Exit(code)
}

func waitReady() {
	ready := waitUntil(30*time.Second, func() bool {
		resp, err := client.Get(base + "readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !ready {
		panic("stack not ready")
	}
}

// ownStack starts a stack of the test's own, on a fresh data directory with
// extra settings, and points requests at it until the test ends.
func ownStack(t *testing.T, extra map[string]string) *Stack {
	t.Helper()
	return ownStackLogging(t, extra, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// ownStackLogging is ownStack logging to log.
func ownStackLogging(t *testing.T, extra map[string]string, log *slog.Logger) *Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Start(ctx, testConfig(t.TempDir(), extra), log)
	if err != nil {
		t.Fatal(err)
	}
	saved := base
	base = "http://" + st.Addr + "/"
	t.Cleanup(func() {
		base = saved
		st.Close()
	})
	waitReadyAt(t, base)
	return st
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
	token  string // the bearer token sent, to explain a 401
}

func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not JSON (%d): %s", r.status, r.body)
	}
	return m
}

// outcomeText is the first issue's details text of an OperationOutcome body.
func (r *response) outcomeText(t *testing.T) string {
	t.Helper()
	m := r.json(t)
	if m["resourceType"] != "OperationOutcome" {
		t.Fatalf("not an OperationOutcome: %s", r.body)
	}
	issue := m["issue"].([]any)[0].(map[string]any)
	d, _ := issue["details"].(map[string]any)
	s, _ := d["text"].(string)
	return s
}

func do(t *testing.T, method, path, token, contentType string, body []byte, hdr ...string) *response {
	t.Helper()
	req, err := http.NewRequest(method, baseFor(t)+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &response{status: resp.StatusCode, header: resp.Header, body: b, token: token}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func expect(t *testing.T, r *response, status int) {
	t.Helper()
	if r.status != status {
		why := ""
		if r.status == 401 && r.token != "" && stack != nil {
			why = "\nthe shared stack says: " + whyRefused(r.token)
		}
		t.Fatalf("status %d, want %d: %s%s", r.status, status, r.body, why)
	}
}

// clientToken gets an access token with client credentials.
func clientToken(t *testing.T, id, secret string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	return r.json(t)["access_token"].(string)
}

func superToken(t *testing.T) string { return clientToken(t, saID, saSec) }

// project creates a project and a client in it, and returns the project id
// and a token of that client (a member without admin rights).
func project(t *testing.T, name string) (string, string) {
	t.Helper()
	su := superToken(t)
	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": name}))
	expect(t, r, 201)
	pid := r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name + " client"}))
	expect(t, r, 201)
	c := r.json(t)
	return pid, clientToken(t, c["id"].(string), c["secret"].(string))
}

// whyRefused says why the shared stack's gateway refuses tok, from its own
// session view, for a test that met an unexpected 401.
func whyRefused(tok string) string {
	_, payload, _ := strings.Cut(tok, ".")
	payload, _, _ = strings.Cut(payload, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	var c struct {
		ID      string `json:"jti"`
		LoginID string `json:"login_id"`
		Exp     int64  `json:"exp"`
	}
	if err != nil || json.Unmarshal(raw, &c) != nil {
		return "not a JWT"
	}
	if stack.view.Revoked(c.ID) {
		return "token " + c.ID + " revoked"
	}
	stored := "not in the bucket"
	if l, err := stack.conns.Sessions.GetLogin(context.Background(), c.LoginID); err == nil {
		stored = fmt.Sprintf("in the bucket: membership %q, granted %v, revoked %v", l.Membership, l.Granted, l.Revoked)
	}
	if _, _, _, err := stack.view.Lookup(context.Background(), c.LoginID); err != nil {
		return fmt.Sprintf("login %s: %v (%s)", c.LoginID, err, stored)
	}
	return fmt.Sprintf("login %s counts now; token expires %v", c.LoginID, time.Unix(c.Exp, 0))
}
