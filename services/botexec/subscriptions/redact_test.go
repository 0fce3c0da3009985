package subscriptions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

func TestEndpointForLog(t *testing.T) {
	cases := []struct{ name, raw, want string }{
		{"plain", "https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"query and fragment", "https://hooks.example.com/in?token=s3cret&x=1#frag", "https://hooks.example.com/in"},
		{"userinfo", "https://user:s3cret@hooks.example.com:8443/in", "https://hooks.example.com:8443/in"},
		{"as net/http quotes it", "https://user:***@hooks.example.com/in?token=s3cret", "https://hooks.example.com/in"},
		{"no host", "s3cret", "(endpoint not shown)"},
		{"unparsable", "https://hooks.example.com/%zz?token=s3cret", "(endpoint not shown)"},
	}
	for _, tc := range cases {
		if got := endpointForLog(tc.raw); got != tc.want {
			t.Errorf("%s: endpointForLog(%q) = %q, want %q", tc.name, tc.raw, got, tc.want)
		}
	}
	if got := errorForLog(errors.New("plain")); got != "plain" {
		t.Errorf("an error without a URL: %q", got)
	}
	_, err := url.Parse("https://hooks.example.com/%zz?token=s3cret")
	if got := errorForLog(fmt.Errorf("rest-hook: %w", err)); strings.Contains(got, "s3cret") {
		t.Errorf("an unparsable endpoint is logged whole: %q", got)
	}
}

// A rest-hook that fails its last attempt is logged (and kept as a dead
// letter) with its endpoint's scheme, host and path only: no userinfo,
// query or fragment, where tokens are.
func TestDeadLetterLogRedactsEndpoint(t *testing.T) {
	env := testenv.New(t)
	var logs bytes.Buffer
	s := New(Config{JS: env.JS, Audit: func(string, *resource.AuditEvent) {},
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	// A real failed post: nothing listens on port 1.
	endpoint := "http://hook-user:hook-pass@127.0.0.1:1/hook/in?token=s3cret-token#frag-part"
	_, err := post(context.Background(), hookClient(true), endpoint, http.Header{}, []byte("{}"))
	if err == nil {
		t.Fatal("a post to a closed port succeeded")
	}
	d := &delivery{Subscription: "sub1", Project: "p1", Event: repo.Event{Type: "Patient", ID: "pat1", VersionID: "v1"}}
	s.deadLetter(d, 2, fmt.Errorf("rest-hook: %w", err))
	out := logs.String()
	if !strings.Contains(out, "dead letter") || !strings.Contains(out, "http://127.0.0.1:1/hook/in") {
		t.Fatalf("the dead letter's log line lacks the endpoint's redacted form:\n%s", out)
	}
	for _, secret := range []string{"s3cret-token", "token=", "hook-user", "hook-pass", "frag-part"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
}
