package identity

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// siteverify is a local reCAPTCHA verification server that accepts one
// token per secret key and records the secrets it was asked with.
type siteverify struct {
	url    string
	tokens map[string]string // secret -> the token it accepts
	mu     sync.Mutex
	asked  []string
}

func newSiteverify(t *testing.T, tokens map[string]string) *siteverify {
	t.Helper()
	v := &siteverify{tokens: tokens}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, token := r.FormValue("secret"), r.FormValue("response")
		v.mu.Lock()
		v.asked = append(v.asked, secret)
		v.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if want, ok := v.tokens[secret]; ok && token == want {
			_, _ = w.Write([]byte(`{"success": true}`))
			return
		}
		_, _ = w.Write([]byte(`{"success": false, "error-codes": ["invalid-input-secret"]}`))
	}))
	t.Cleanup(srv.Close)
	v.url = srv.URL
	return v
}

func (v *siteverify) secrets() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.Join(v.asked, ",")
}

// A registration's recaptchaSiteKey chooses the secret key that verifies
// its token: the server's for the server's site key, else the one of the
// Project.site with that key (Medplum's validateRecaptcha), with Medplum's
// texts for a key no project has, a site without a secret, a missing token
// and a failed check.
func TestRecaptchaProjectSiteKey(t *testing.T) {
	ctx := context.Background()
	verify := newSiteverify(t, map[string]string{"server-secret": "server-token", "clinic-secret": "clinic-token"})
	s := another(t, Config{BaseURL: testBase, RecaptchaSecret: "server-secret", RecaptchaSiteKey: "server-site-key", RecaptchaURL: verify.url})

	clinic := newProject(t, "reCAPTCHA Clinic")
	policy := newResource(t, clinic, map[string]any{"resourceType": "AccessPolicy", "name": "patients",
		"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}})
	clinicKey := "clinic-site-key-" + clinic[:8]
	setProject(t, clinic, func(p map[string]any) {
		p["defaultPatientAccessPolicy"] = map[string]any{"reference": policy}
		p["site"] = []any{map[string]any{"name": "portal", "domain": []any{"portal.example"},
			"recaptchaSiteKey": clinicKey, "recaptchaSecretKey": "clinic-secret"}}
	})
	noSecret := newProject(t, "No secret")
	noSecretKey := "no-secret-key-" + noSecret[:8]
	setProject(t, noSecret, func(p map[string]any) {
		p["site"] = []any{map[string]any{"name": "s", "domain": []any{"s.example"}, "recaptchaSiteKey": noSecretKey}}
	})
	closed := newProject(t, "Closed")
	closedKey := "closed-site-key-" + closed[:8]
	setProject(t, closed, func(p map[string]any) {
		p["site"] = []any{map[string]any{"name": "s", "domain": []any{"c.example"}, "recaptchaSiteKey": closedKey, "recaptchaSecretKey": "closed-secret"}}
	})

	n := 0
	body := func(fields map[string]any) *jsonBody {
		n++
		b := jsonBody{"firstName": "Rex", "lastName": "Captcha", "email": newEmail("site"), "password": "a long password"}
		for k, v := range fields {
			b[k] = v
		}
		return &b
	}
	post := func(b *jsonBody) (map[string]any, error) {
		resp, err := s.registration.NewUser(ctx, jsonRequest("10.3.9."+string(rune('0'+n%10)), map[string]any(*b)))
		if err != nil {
			return nil, err
		}
		return decoded(t, resp, nil, 200), nil
	}
	userProject := func(t *testing.T, out map[string]any) any {
		t.Helper()
		l, err := live.conns.Sessions.GetLogin(ctx, out["login"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return l.Project
	}

	t.Run("the server's site key, the server's secret", func(t *testing.T) {
		out, err := post(body(map[string]any{"recaptchaSiteKey": "server-site-key", "recaptchaToken": "server-token"}))
		if err != nil {
			t.Fatal(err)
		}
		if p := userProject(t, out); p != "" {
			t.Errorf("a server-wide registration landed in %v", p)
		}
		_, err = post(body(map[string]any{"recaptchaSiteKey": "server-site-key", "recaptchaToken": "clinic-token"}))
		expectOutcome(t, err, 400, "Recaptcha failed", "")
	})

	t.Run("a project's site key, its secret", func(t *testing.T) {
		out, err := post(body(map[string]any{"projectId": clinic, "recaptchaSiteKey": clinicKey, "recaptchaToken": "clinic-token"}))
		if err != nil {
			t.Fatal(err)
		}
		if p := userProject(t, out); p != clinic {
			t.Errorf("registered into %v, want %s", p, clinic)
		}
		// The key alone names the project.
		out, err = post(body(map[string]any{"recaptchaSiteKey": clinicKey, "recaptchaToken": "clinic-token"}))
		if err != nil {
			t.Fatal(err)
		}
		if p := userProject(t, out); p != clinic {
			t.Errorf("registered into %v, want %s", p, clinic)
		}
	})

	t.Run("a wrong secret's token fails", func(t *testing.T) {
		_, err := post(body(map[string]any{"projectId": clinic, "recaptchaSiteKey": clinicKey, "recaptchaToken": "server-token"}))
		expectOutcome(t, err, 400, "Recaptcha failed", "")
		_, err = post(body(map[string]any{"projectId": clinic, "recaptchaSiteKey": clinicKey}))
		expectOutcome(t, err, 400, "Recaptcha token is required", "")
	})

	t.Run("unknown site keys", func(t *testing.T) {
		for _, b := range []*jsonBody{
			body(map[string]any{"recaptchaSiteKey": "nobody-has-this-key", "recaptchaToken": "clinic-token"}),
			// Another project than the site's (Medplum's "incorrect project ID").
			body(map[string]any{"projectId": noSecret, "recaptchaSiteKey": clinicKey, "recaptchaToken": "clinic-token"}),
			body(map[string]any{"projectId": "00000000-0000-4000-8000-000000000000", "recaptchaSiteKey": clinicKey, "recaptchaToken": "clinic-token"}),
			// Not a key at all: never searched for.
			body(map[string]any{"recaptchaSiteKey": "a,b|c", "recaptchaToken": "clinic-token"}),
			body(map[string]any{"recaptchaSiteKey": strings.Repeat("k", 257), "recaptchaToken": "clinic-token"}),
		} {
			_, err := post(b)
			expectOutcome(t, err, 400, "Invalid recaptchaSiteKey", "")
		}
	})

	t.Run("a site without a secret key", func(t *testing.T) {
		_, err := post(body(map[string]any{"recaptchaSiteKey": noSecretKey, "recaptchaToken": "clinic-token"}))
		expectOutcome(t, err, 400, "Invalid recaptchaSecretKey", "")
	})

	t.Run("a site's project must take registrations", func(t *testing.T) {
		_, err := post(body(map[string]any{"recaptchaSiteKey": closedKey, "recaptchaToken": "closed-token"}))
		expectOutcome(t, err, 400, "Project does not allow open registration", "")
	})

	// Beyond Medplum: a project with its own site key is not joined past
	// its check with the server's key, or with none.
	t.Run("a project with a site key needs it", func(t *testing.T) {
		for _, fields := range []map[string]any{
			{"projectId": clinic, "recaptchaSiteKey": "server-site-key", "recaptchaToken": "server-token"},
			{"projectId": clinic, "recaptchaToken": "server-token"},
		} {
			_, err := post(body(fields))
			expectOutcome(t, err, 400, "Invalid recaptchaSiteKey", "")
		}
	})

	if got := verify.secrets(); strings.Contains(got, "closed-secret") || !strings.Contains(got, "clinic-secret") || !strings.Contains(got, "server-secret") {
		t.Errorf("secrets asked %s", got)
	}
}

type jsonBody map[string]any
