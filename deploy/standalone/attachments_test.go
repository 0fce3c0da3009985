package standalone

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/presign"
	"github.com/pinion-health/pinion/pkg/repo"
)

// TestAuthMethod: the web app's first sign-in step. The password form
// ({}) for any valid address, known or not; a domain configured with an
// identity provider gets where to send the browser; a bad address is
// Medplum's 400.
func TestAuthMethod(t *testing.T) {
	su := superToken(t)
	r := do(t, "POST", "fhir/R4/DomainConfiguration", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "DomainConfiguration", "domain": "sso-clinic.example",
		"identityProvider": map[string]any{
			"authorizeUrl": "https://idp.example/oauth2/authorize?tenant=7",
			"tokenUrl":     "https://idp.example/oauth2/token", "userInfoUrl": "https://idp.example/userinfo",
			"clientId": "pinion-app", "clientSecret": "not-a-real-secret",
		}}))
	expect(t, r, 201)

	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"unknown address", `{"email":"nobody-here@example.com"}`, 200, "{}"},
		{"other domain", `{"email":"ada@clinic.example"}`, 200, "{}"},
		{"not an address", `{"email":"not-an-email"}`, 400, ""},
		{"missing", `{}`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", "auth/method", "", "application/json", []byte(tc.body))
			if tc.status == 400 {
				expectOutcome(t, r, 400, "Valid email address is required", "email")
				return
			}
			expect(t, r, tc.status)
			if got := strings.TrimSpace(string(r.body)); got != tc.want {
				t.Fatalf("answer %s, want %s", got, tc.want)
			}
		})
	}

	t.Run("external identity provider", func(t *testing.T) {
		r := do(t, "POST", "auth/method", "", "application/json", []byte(`{"email":"Bob@SSO-Clinic.example"}`))
		expect(t, r, 200)
		m := r.json(t)
		if m["domain"] != "SSO-Clinic.example" {
			t.Fatalf("domain %v", m["domain"])
		}
		u, err := url.Parse(m["authorizeUrl"].(string))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if u.Scheme+"://"+u.Host+u.Path != "https://idp.example/oauth2/authorize" || q.Get("tenant") != "7" ||
			q.Get("client_id") != "pinion-app" || q.Get("response_type") != "code" ||
			q.Get("scope") != "openid profile email" || !strings.HasSuffix(q.Get("redirect_uri"), "/auth/external") {
			t.Fatalf("authorizeUrl %s", u)
		}
		if strings.Contains(string(r.body), "not-a-real-secret") {
			t.Fatalf("the client secret leaked: %s", r.body)
		}
	})

	t.Run("body bounded", func(t *testing.T) {
		big := `{"email":"a@b.example","pad":"` + strings.Repeat("x", 4096) + `"}`
		r := do(t, "POST", "auth/method", "", "application/json", []byte(big))
		expect(t, r, 413)
		if r.json(t)["resourceType"] != "OperationOutcome" {
			t.Fatalf("not an OperationOutcome: %s", r.body)
		}
	})
}

// fetchStorage loads a signed URL as a browser would, with no token, on
// the stack's real address (the URL carries the configured base URL).
func fetchStorage(t *testing.T, signed string) *response {
	t.Helper()
	i := strings.Index(signed, "storage/")
	if i < 0 || !strings.HasPrefix(signed, "http") {
		t.Fatalf("not an absolute storage URL: %q", signed)
	}
	return do(t, "GET", signed[i:], "", "", nil)
}

// photoURL is the url of a resource's first photo.
func photoURL(t *testing.T, res map[string]any) string {
	t.Helper()
	photos, _ := res["photo"].([]any)
	if len(photos) == 0 {
		t.Fatalf("no photo: %v", res)
	}
	u, _ := photos[0].(map[string]any)["url"].(string)
	return u
}

// TestSignedBinaryURLs: Binary.url and the attachments that name a
// Binary are absolute, short-lived signed URLs a browser loads without a
// bearer token; an altered, moved or expired one is 403.
func TestSignedBinaryURLs(t *testing.T) {
	_, tok := project(t, "attachments")
	png := []byte("\x89PNG\r\n\x1a\n not really an image")
	up := do(t, "POST", "fhir/R4/Binary", tok, "image/png", png)
	expect(t, up, 201)
	bin := up.json(t)
	id := bin["id"].(string)
	signed, _ := bin["url"].(string)

	t.Run("upload answer loads without a token", func(t *testing.T) {
		r := fetchStorage(t, signed)
		expect(t, r, 200)
		if !bytes.Equal(r.body, png) {
			t.Fatalf("content %q, want %q", r.body, png)
		}
		if ct := r.header.Get("Content-Type"); ct != "image/png" {
			t.Fatalf("Content-Type %q", ct)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Content-Disposition") != "inline" {
			t.Fatalf("headers %v", r.header)
		}
	})

	t.Run("active content is a download", func(t *testing.T) {
		// /storage/ shares the API's origin: a page uploaded as HTML or
		// SVG must not run there.
		for _, ct := range []string{"text/html", "image/svg+xml"} {
			up := do(t, "POST", "fhir/R4/Binary", tok, ct, []byte("<script>alert(1)</script>"))
			expect(t, up, 201)
			r := fetchStorage(t, up.json(t)["url"].(string))
			expect(t, r, 200)
			if r.header.Get("Content-Disposition") != "attachment" || r.header.Get("Content-Type") != ct {
				t.Fatalf("%s: headers %v", ct, r.header)
			}
		}
	})

	t.Run("read as a resource", func(t *testing.T) {
		r := do(t, "GET", "fhir/R4/Binary/"+id, tok, "", nil, "Accept", "application/fhir+json")
		expect(t, r, 200)
		u, _ := r.json(t)["url"].(string)
		if !strings.Contains(u, "/storage/"+id+"/") || !strings.Contains(u, "Signature=") {
			t.Fatalf("Binary.url %q", u)
		}
		expect(t, fetchStorage(t, u), 200)
	})

	t.Run("refused", func(t *testing.T) {
		u, err := url.Parse(signed)
		if err != nil {
			t.Fatal(err)
		}
		other := do(t, "POST", "fhir/R4/Binary", tok, "text/plain", []byte("another"))
		expect(t, other, 201)
		otherID := other.json(t)["id"].(string)
		q := u.Query()
		sig := q.Get("Signature")
		if sig == "" {
			t.Fatalf("no signature in %q", signed)
		}
		flipped := "A"
		if sig[0] == 'A' {
			flipped = "B"
		}
		exp := q.Get("Expires")
		for name, mod := range map[string]func(q url.Values, path string) (url.Values, string){
			"signature altered": func(q url.Values, p string) (url.Values, string) { q.Set("Signature", flipped+sig[1:]); return q, p },
			"expiry moved":      func(q url.Values, p string) (url.Values, string) { q.Set("Expires", exp+"0"); return q, p },
			"no signature":      func(q url.Values, p string) (url.Values, string) { q.Del("Signature"); return q, p },
			"other Binary": func(q url.Values, p string) (url.Values, string) {
				return q, strings.Replace(p, "/"+id+"/", "/"+otherID+"/", 1)
			},
		} {
			t.Run(name, func(t *testing.T) {
				q2, p := mod(u.Query(), u.Path)
				r := do(t, "GET", strings.TrimPrefix(p, "/")+"?"+q2.Encode(), "", "", nil)
				expectOutcome(t, r, 403, "Invalid signature")
			})
		}
	})

	t.Run("expired", func(t *testing.T) {
		// A URL this server signed an hour and a minute ago: the signer's
		// clock moved back, over the stack's own key.
		past := presign.New("http://localhost/", stack.conns.Repo)
		past.Now = func() time.Time { return time.Now().Add(-presign.Lifetime - time.Minute) }
		old, err := past.URL(context.Background(), id, bin["meta"].(map[string]any)["versionId"].(string))
		if err != nil {
			t.Fatal(err)
		}
		expectOutcome(t, fetchStorage(t, old), 403, "URL has expired")
	})

	t.Run("Patient.photo in reads and searches", func(t *testing.T) {
		r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Patient", "name": []any{map[string]any{"family": "Photographed"}},
			"photo": []any{map[string]any{"contentType": "image/png", "url": "Binary/" + id}}}))
		expect(t, r, 201)
		pat := r.json(t)
		for name, get := range map[string]func() map[string]any{
			"create": func() map[string]any { return pat },
			"read": func() map[string]any {
				r := do(t, "GET", "fhir/R4/Patient/"+pat["id"].(string), tok, "", nil)
				expect(t, r, 200)
				return r.json(t)
			},
			"graphql": func() map[string]any {
				r := do(t, "POST", "fhir/R4/$graphql", tok, "application/json", mustJSON(map[string]any{
					"query": `{ Patient(id: "` + pat["id"].(string) + `") { photo { contentType url } } }`}))
				expect(t, r, 200)
				data, _ := r.json(t)["data"].(map[string]any)
				p, _ := data["Patient"].(map[string]any)
				if p == nil {
					t.Fatalf("graphql answer %s", r.body)
				}
				return p
			},
			"search": func() map[string]any {
				r := do(t, "GET", "fhir/R4/Patient?family=Photographed", tok, "", nil)
				expect(t, r, 200)
				entries, _ := r.json(t)["entry"].([]any)
				if len(entries) != 1 {
					t.Fatalf("entries %v", entries)
				}
				return entries[0].(map[string]any)["resource"].(map[string]any)
			},
		} {
			t.Run(name, func(t *testing.T) {
				got := fetchStorage(t, photoURL(t, get()))
				expect(t, got, 200)
				if !bytes.Equal(got.body, png) {
					t.Fatalf("content %q", got.body)
				}
			})
		}
		t.Run("written back", func(t *testing.T) {
			// The app saves what it read: the store keeps the reference,
			// not a URL that expires.
			r := do(t, "GET", "fhir/R4/Patient/"+pat["id"].(string), tok, "", nil)
			expect(t, r, 200)
			read := r.json(t)
			read["gender"] = "female"
			r = do(t, "PUT", "fhir/R4/Patient/"+pat["id"].(string), tok, "application/fhir+json", mustJSON(read))
			expect(t, r, 200)
			r = do(t, "PATCH", "fhir/R4/Patient/"+pat["id"].(string), tok, "application/json-patch+json", mustJSON([]any{
				map[string]any{"op": "add", "path": "/photo/-", "value": map[string]any{"url": photoURL(t, read)}}}))
			expect(t, r, 200)
			stored, err := stack.conns.Repo.Read(context.Background(), repo.AllProjects, "Patient", pat["id"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(stored.JSON), "storage/") || strings.Count(string(stored.JSON), `"url":"Binary/`+id+`"`) != 2 {
				t.Fatalf("stored %s", stored.JSON)
			}
		})
		// Stored as written: the signed URL is only in answers.
		su := superToken(t)
		r = do(t, "GET", "fhir/R4/Patient/"+pat["id"].(string)+"/_history/"+pat["meta"].(map[string]any)["versionId"].(string), su, "", nil)
		expect(t, r, 200)
		if u := photoURL(t, r.json(t)); !strings.Contains(u, "/storage/"+id+"/") {
			t.Fatalf("super admin's vread: photo url %q", u)
		}
	})

	t.Run("a Binary the caller cannot read is not signed", func(t *testing.T) {
		_, other := project(t, "attachments elsewhere")
		r := do(t, "POST", "fhir/R4/Patient", other, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Patient", "photo": []any{map[string]any{"contentType": "image/png", "url": "Binary/" + id}}}))
		expect(t, r, 201)
		if u := photoURL(t, r.json(t)); u != "Binary/"+id {
			t.Fatalf("another project's Binary was signed: %q", u)
		}
	})
}

// TestMePhotoSigned: /auth/me's profile photo loads in the app's <img>.
func TestMePhotoSigned(t *testing.T) {
	su := superToken(t)
	pid, _ := project(t, "me photo")
	ada := projectAdmin(t, su, pid, "photo-ada@example.com")
	up := do(t, "POST", "fhir/R4/Binary", ada, "image/jpeg", []byte("jpeg bytes"))
	expect(t, up, 201)
	id := up.json(t)["id"].(string)
	me := do(t, "GET", "auth/me", ada, "", nil)
	expect(t, me, 200)
	prof := me.json(t)["profile"].(map[string]any)
	ref := prof["resourceType"].(string) + "/" + prof["id"].(string)
	r := do(t, "PATCH", "fhir/R4/"+ref, ada, "application/json-patch+json", mustJSON([]any{map[string]any{
		"op": "add", "path": "/photo", "value": []any{map[string]any{"contentType": "image/jpeg", "url": "Binary/" + id}}}}))
	expect(t, r, 200)
	me = do(t, "GET", "auth/me", ada, "", nil)
	expect(t, me, 200)
	got := fetchStorage(t, photoURL(t, me.json(t)["profile"].(map[string]any)))
	expect(t, got, 200)
	if string(got.body) != "jpeg bytes" || got.header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("photo %q %q", got.body, got.header.Get("Content-Type"))
	}
}
