package standalone

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The gateway logs one line per request, at info: route, status, duration,
// request id and who asked — never a token, a secret, a query or a body.
func TestAccessLog(t *testing.T) {
	var out lockedBuffer
	ownStackLogging(t, map[string]string{"PINION_LOG_LEVEL": "info"}, slog.New(slog.NewJSONHandler(&out, nil)))
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {saID}, "client_secret": {saSec}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	tok := r.json(t)["access_token"].(string)
	r = do(t, "GET", "fhir/R4/Patient?name=Secretname", tok, "", nil, "X-Request-Id", "access-log-test")
	expect(t, r, 200)
	expect(t, do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", patient("Bodyname")), 201)
	expect(t, do(t, "GET", "fhir/R4/Patient", "", "", nil, "Authorization", basic(saID, saSec+"wrong")), 401)
	do(t, "GET", "setpassword/some-id/the-link-secret", "", "", nil)
	do(t, "GET", "console/members/some-member/remove", "", "", nil) // not signed in: to the sign-in page

	log := out.String()
	for _, secret := range []string{tok, saSec, "the-link-secret", "Secretname", "Bodyname", "Basic "} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "request" {
			lines = append(lines, m)
		}
	}
	find := func(method, route string, status float64) map[string]any {
		for _, m := range lines {
			if m["method"] == method && m["route"] == route && m["status"] == status {
				return m
			}
		}
		t.Fatalf("no line for %s %s %v in:\n%s", method, route, status, log)
		return nil
	}
	search := find("GET", "/fhir/R4/:type", 200)
	if search["request_id"] != "access-log-test" || search["type"] != "Patient" || search["level"] != "INFO" {
		t.Errorf("search line: %v", search)
	}
	if search["user"] != "ClientApplication/"+saID || search["project"] == nil || search["ms"] == nil {
		t.Errorf("search line says not who asked: %v", search)
	}
	find("POST", "/oauth2/token", 200)
	find("POST", "/fhir/R4/:type", 201)
	if refused := find("GET", "/fhir/R4/:type", 401); refused["user"] != nil {
		t.Errorf("a refused caller is named: %v", refused)
	}
	find("GET", "/setpassword/:id/:secret", 404)
	find("GET", "/console/members/:id/remove", 302)
}
