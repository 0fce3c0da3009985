package stack

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// client talks to one gateway.
type client struct {
	t    *testing.T
	base string // http://host:port/
	http *http.Client
}

func newClient(t *testing.T, base string) *client {
	return &client{t: t, base: base, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends a request and returns the status and the body.
func (c *client) do(method, path, token, contentType string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// expect sends a request, requires the status and decodes a JSON answer.
func (c *client) expect(status int, method, path, token, contentType string, body any) map[string]any {
	c.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			c.t.Fatal(err)
		}
	}
	got, answer := c.do(method, path, token, contentType, raw)
	if got != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, answer)
	}
	m := map[string]any{}
	_ = json.Unmarshal(answer, &m)
	return m
}

// waitReady waits for the gateway's /readyz.
func (c *client) waitReady(timeout time.Duration) {
	c.t.Helper()
	ready := waitUntil(timeout, func() bool {
		resp, err := c.http.Get(c.base + "readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ready {
		c.t.Fatalf("gateway at %s not ready after %s", c.base, timeout)
	}
}

func (c *client) clientToken(id, secret string) string {
	c.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	tok, _ := c.expect(200, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", form.Encode())["access_token"].(string)
	if tok == "" {
		c.t.Fatal("no access token")
	}
	return tok
}

// signIn is the PKCE sign-in of a user: /auth/login, then the code for tokens.
func (c *client) signIn(email, password string) string {
	c.t.Helper()
	verifier := "verifier-" + strings.Repeat("v", 40)
	sum := sha256.Sum256([]byte(verifier))
	login := c.expect(200, "POST", "auth/login", "", "application/json", map[string]any{
		"email": email, "password": password, "scope": "openid",
		"codeChallenge": base64.RawURLEncoding.EncodeToString(sum[:]), "codeChallengeMethod": "S256",
	})
	form := url.Values{"grant_type": {"authorization_code"}, "code": {str(c.t, login, "code")}, "code_verifier": {verifier}}
	return str(c.t, c.expect(200, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", form.Encode()), "access_token")
}

func str(t *testing.T, m map[string]any, key string) string {
	t.Helper()
	s, _ := m[key].(string)
	if s == "" {
		t.Fatalf("no %q in %v", key, m)
	}
	return s
}

// storyOptions are the parts of the story a deployment may lack.
type storyOptions struct {
	// mailDir, when set, is where the membership service writes e-mails
	// (no SMTP server): the story waits for the invitation there.
	mailDir func() []string
}

// runStory is the main user story over HTTP, touching every service and
// every kind of NATS traffic: request/reply to each service, JetStream
// saga steps (invite), key-value writes and watches (logins, memberships,
// revoked tokens), resource events, and a bot's calls back into fhir.
func runStory(t *testing.T, c *client, superID, superSecret string, o storyOptions) {
	su := c.clientToken(superID, superSecret)

	// A project, a client application in it, and its token.
	pid := str(t, c.expect(201, "POST", "admin/Project", su, "application/json",
		map[string]any{"resourceType": "Project", "name": "Deployment check"}), "id")
	app := c.expect(201, "POST", "admin/projects/"+pid+"/client", su, "application/json", map[string]any{"name": "clinic app"})
	appTok := c.clientToken(str(t, app, "id"), str(t, app, "secret"))

	// A Patient: create, read, search.
	patient := str(t, c.expect(201, "POST", "fhir/R4/Patient", appTok, "application/fhir+json",
		map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"given": []any{"Alice"}, "family": "Deployment"}}}), "id")
	if got := c.expect(200, "GET", "fhir/R4/Patient/"+patient, appTok, "", nil)["id"]; got != patient {
		t.Fatalf("read Patient/%s: id %v", patient, got)
	}
	if e, _ := c.expect(200, "GET", "fhir/R4/Patient?name=deployment", appTok, "", nil)["entry"].([]any); len(e) != 1 {
		t.Fatalf("search: %d entries, want 1", len(e))
	}

	// The invite saga (user → profile → membership), then the new user
	// signs in and sees who they are.
	member := c.expect(200, "POST", "admin/projects/"+pid+"/invite", su, "application/json", map[string]any{
		"resourceType": "Practitioner", "firstName": "Dee", "lastName": "Ploy", "email": "dee@example.com",
		"sendEmail": false, "password": "a long enough password",
	})
	memberID := str(t, member, "id")
	dee := c.signIn("dee@example.com", "a long enough password")
	c.expect(200, "GET", "auth/me", dee, "", nil)

	// An invite by e-mail: the mail queue step.
	c.expect(200, "POST", "admin/projects/"+pid+"/invite", su, "application/json", map[string]any{
		"resourceType": "Practitioner", "firstName": "Em", "lastName": "Ail", "email": "em@example.com",
	})
	if o.mailDir != nil && !waitUntil(15*time.Second, func() bool { return len(o.mailDir()) > 0 }) {
		t.Fatal("no invitation e-mail written")
	}

	// A bot that writes and reads through its medplum client: botexec calls
	// the fhir service on the bot's behalf.
	bot := str(t, c.expect(201, "POST", "admin/projects/"+pid+"/bot", su, "application/json", map[string]any{"name": "observer"}), "id")
	c.expect(200, "POST", "fhir/R4/Bot/"+bot+"/$deploy", su, "application/json", map[string]any{"filename": "observer.js", "code": `
exports.handler = async (medplum, event) => {
  const o = await medplum.createResource({resourceType: 'Observation', status: 'final', code: {text: event.input}});
  return medplum.readResource('Observation', o.id);
};`})
	obs := c.expect(200, "POST", "fhir/R4/Bot/"+bot+"/$execute", appTok, "text/plain", "heart rate")
	if obs["resourceType"] != "Observation" {
		t.Fatalf("bot answered %v", obs)
	}

	// Signing out revokes the token; removing a member ends theirs at once.
	c.expect(200, "POST", "oauth2/logout", appTok, "application/json", "{}")
	c.expect(401, "GET", "auth/me", appTok, "", nil)
	c.expect(200, "DELETE", "admin/projects/"+pid+"/members/"+memberID, su, "", nil)
	c.expect(401, "GET", "fhir/R4/Patient", dee, "", nil)
}
