package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// corsHeaders are the response's Access-Control-* headers.
func corsHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = strings.Join(v, ",")
		}
	}
	return out
}

// The web app's origin, and the listed ones, get Medplum's CORS answers on
// the API's paths; any other origin or path gets no CORS header at all.
func TestCORS(t *testing.T) {
	base, _ := startGatewayWith(t, Config{AppBaseURL: "http://localhost:3000/", AllowedOrigins: []string{"https://App.Example.com"}})
	preflight := func(path, origin string) (int, http.Header) {
		st, _, h := send(t, "OPTIONS", base+path, nil, map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,x-medplum"})
		return st, h
	}
	for _, origin := range []string{"http://localhost:3000", "https://app.example.com"} {
		st, h := preflight("fhir/R4/Patient", origin)
		if st != 204 || h.Get("Access-Control-Allow-Origin") != origin || h.Get("Access-Control-Allow-Credentials") != "true" ||
			!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || h.Get("Access-Control-Allow-Headers") != "authorization,content-type,x-medplum" {
			t.Errorf("preflight from %s: %d %v", origin, st, corsHeaders(h))
		}
		// Refused by the gateway itself (no token): CORS headers still, so
		// the app can read the 401.
		st, _, h = send(t, "GET", base+"fhir/R4/Patient", nil, map[string]string{"Origin": origin})
		if st != 401 || h.Get("Access-Control-Allow-Origin") != origin || h.Get("Access-Control-Allow-Credentials") != "true" ||
			h.Get("Access-Control-Expose-Headers") != "Content-Location,ETag,Last-Modified,Location" {
			t.Errorf("GET from %s: %d %v", origin, st, corsHeaders(h))
		}
	}
	// Another origin, one that only starts like the app's, and a page
	// outside the API: no CORS header, and a preflight is not answered.
	for _, c := range []struct{ path, origin string }{
		{"fhir/R4/Patient", "https://evil.example"},
		{"fhir/R4/Patient", "http://localhost:300"},
		{"fhir/R4/Patient", "null"},
		{"healthcheck", "http://localhost:3000"},
		{"livez", "http://localhost:3000"},
	} {
		st, h := preflight(c.path, c.origin)
		if st == 204 || len(corsHeaders(h)) > 0 {
			t.Errorf("preflight of /%s from %s: %d %v", c.path, c.origin, st, corsHeaders(h))
		}
		_, _, h = send(t, "GET", base+c.path, nil, map[string]string{"Origin": c.origin})
		if len(corsHeaders(h)) > 0 {
			t.Errorf("GET /%s from %s: %v", c.path, c.origin, corsHeaders(h))
		}
	}
}

// "*" lets any origin in, still only on the API's paths.
func TestCORSAnyOrigin(t *testing.T) {
	base, _ := startGatewayWith(t, Config{AppBaseURL: "http://localhost:3000/", AllowedOrigins: []string{"*"}})
	_, _, h := send(t, "GET", base+"fhir/R4/Patient", nil, map[string]string{"Origin": "https://anywhere.example"})
	if h.Get("Access-Control-Allow-Origin") != "https://anywhere.example" {
		t.Errorf("with *, another origin got %v", corsHeaders(h))
	}
	_, _, h = send(t, "GET", base+"livez", nil, map[string]string{"Origin": "https://anywhere.example"})
	if len(corsHeaders(h)) > 0 {
		t.Errorf("with *, /livez got %v", corsHeaders(h))
	}
}
