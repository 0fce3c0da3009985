package identity

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// storeOnly is the service over a real SQLite store and nothing else:
// enough for what only reads and writes credentials.
func storeOnly(t *testing.T) *Service {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{Sync: "off", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{BaseURL: "https://pinion.example/"}, nil, nil, r, nil, nil)
}

// Each way a set-password link can be unusable gets its own page, with a
// way to ask for a new link, and the form is never shown.
func TestSetPasswordLinkPages(t *testing.T) {
	s := storeOnly(t)
	ctx := context.Background()
	page := func(link string) *bus.Response {
		t.Helper()
		parts := strings.Split(strings.TrimPrefix(link, s.cfg.BaseURL+"setpassword/"), "/")
		resp, err := s.setPasswordPage(ctx, &bus.Request{Method: "GET", Params: map[string]string{"id": parts[0], "secret": parts[1]}, Header: map[string]string{}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expectPage := func(resp *bus.Response, status int, text string) {
		t.Helper()
		body := string(resp.Body)
		if resp.Status != status || !strings.Contains(body, text) || strings.Contains(body, `type="password"`) && status != 200 {
			t.Fatalf("want %d %q, got %d:\n%s", status, text, resp.Status, body)
		}
		if status != 200 && !strings.Contains(body, `href="https://pinion.example/resetpassword"`) {
			t.Fatalf("no way to ask for a new link:\n%s", body)
		}
	}

	_, first, err := s.newPasswordRequest(ctx, "u1", "invite", "")
	if err != nil {
		t.Fatal(err)
	}
	expectPage(page(first), 200, `type="password"`)
	expectPage(page(first[:len(first)-4]+"0000"), 400, "Link not valid")

	// A newer link spends the older one.
	_, second, err := s.newPasswordRequest(ctx, "u1", "reset", "")
	if err != nil {
		t.Fatal(err)
	}
	expectPage(page(first), 400, "Link already used")

	// An expired link.
	id := strings.Split(strings.TrimPrefix(second, s.cfg.BaseURL+"setpassword/"), "/")[0]
	var pr passwordRequest
	if _, _, err := s.loadSecret(ctx, "pwreq:"+id, &pr); err != nil {
		t.Fatal(err)
	}
	pr.Expires = time.Now().Add(-time.Minute)
	if err := s.saveSecret(ctx, "pwreq:"+id, pr); err != nil {
		t.Fatal(err)
	}
	expectPage(page(second), 400, "Link expired")

	// A link to no request at all.
	expectPage(page(s.cfg.BaseURL+"setpassword/00000000-0000-4000-8000-000000000000/"+strings.Repeat("0", 64)), 404, "Link not valid")
}
