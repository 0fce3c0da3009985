package identity

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A local siteverify: tokens "human" pass, others fail; it checks that the
// secret and the client's address were sent.
func recaptchaServer(t *testing.T, calls *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodPost || r.FormValue("secret") != "the-secret" || r.FormValue("remoteip") != "10.3.7.1" {
			http.Error(w, "bad verification request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.FormValue("response") == "human" {
			_, _ = w.Write([]byte(`{"success": true}`))
			return
		}
		_, _ = w.Write([]byte(`{"success": false, "error-codes": ["invalid-input-response"]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRecaptcha(t *testing.T) {
	var calls atomic.Int32
	s := another(t, Config{BaseURL: testBase, RecaptchaSecret: "the-secret", RecaptchaURL: recaptchaServer(t, &calls)})
	ctx := context.Background()
	body := func(token string) map[string]any {
		b := map[string]any{"firstName": "Rex", "lastName": "Captcha", "email": newEmail("captcha"), "password": "a long password"}
		if token != "" {
			b["recaptchaToken"] = token
		}
		return b
	}
	_, err := s.registration.NewUser(ctx, jsonRequest("10.3.7.1", body("")))
	expectOutcome(t, err, 400, "Recaptcha token is required", "")
	_, err = s.registration.NewUser(ctx, jsonRequest("10.3.7.1", body("robot")))
	expectOutcome(t, err, 400, "Recaptcha failed", "")
	resp, err := s.registration.NewUser(ctx, jsonRequest("10.3.7.1", body("human")))
	decoded(t, resp, err, 200)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d verifications, want 2 (none without a token)", n)
	}

	t.Run("an unreachable verifier is 503, not a pass", func(t *testing.T) {
		down := another(t, Config{BaseURL: testBase, RecaptchaSecret: "the-secret", RecaptchaURL: "http://127.0.0.1:1/siteverify"})
		_, err := down.registration.NewUser(ctx, jsonRequest("10.3.7.1", body("human")))
		expectOutcome(t, err, 503, "Recaptcha verification is unavailable", "")
	})

	t.Run("no secret, no check", func(t *testing.T) {
		resp, err := live.svc.registration.NewUser(ctx, jsonRequest("10.3.7.1", body("")))
		decoded(t, resp, err, 200)
	})
}
