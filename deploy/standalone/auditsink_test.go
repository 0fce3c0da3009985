package standalone

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// With PINION_AUDIT_WEBHOOK_URL set, the stack streams its audit trail
// out as it is written (issue 54): a refused sign-in reaches the webhook
// as its stored AuditEvent, in a signed NDJSON body.
func TestAuditTrailStreamedToWebhook(t *testing.T) {
	parallelIn(t, ownStacks)
	const secret = "the SIEM's webhook secret, 32 characters at least"
	var mu sync.Mutex
	var lines [][]byte
	siem := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		ts := r.Header.Get("X-Pinion-Timestamp")
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		if r.Header.Get("X-Pinion-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		lines = append(lines, bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))...)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer siem.Close()
	ca := filepath.Join(t.TempDir(), "siem-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: siem.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	parallelStack(t, map[string]string{"PINION_AUDIT_WEBHOOK_URL": siem.URL + "/audit", "PINION_AUDIT_WEBHOOK_SECRET": secret,
		"PINION_AUDIT_WEBHOOK_CA": ca})

	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "nobody-streamed@example.com", "password": "not a password of anyone's"}))
	expect(t, r, 400)
	if !waitUntil(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if bytes.Contains(l, []byte(`"name":"nobody-streamed@example.com"`)) && bytes.Contains(l, []byte(`"resourceType":"AuditEvent"`)) &&
				bytes.Contains(l, []byte(`"code":"sign-in"`)) && bytes.Contains(l, []byte(`audit-chain`)) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the refused sign-in did not reach the webhook; it had %q", lines)
	}
}
