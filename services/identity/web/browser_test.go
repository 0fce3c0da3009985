package web

import (
	"context"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

func TestBrowserOf(t *testing.T) {
	id := strings.Repeat("a", 43)
	cases := []struct {
		name   string
		cookie string
		known  bool
	}{
		{"our cookie", Cookie + "=" + id, true},
		{"among others", "theme=dark; " + Cookie + "=" + id + "; lang=en", true},
		// Another site's malformed cookie on a shared host must not hide ours.
		{"beside a malformed one", `bad"cookie=x"y; ` + Cookie + "=" + id, true},
		{"none", "", false},
		{"another name", "pinion_browsers=" + id, false},
		{"too short", Cookie + "=" + id[:42], false},
		{"too long", Cookie + "=" + id + "a", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := BrowserOf(&bus.Request{Header: map[string]string{"Cookie": tc.cookie}})
			if b.IsNew == tc.known || (tc.known && b.ID != id) {
				t.Fatalf("%+v", b)
			}
			if !tc.known && (len(b.ID) != 43 || b.ID == id) {
				t.Fatalf("a new browser's id %q", b.ID)
			}
		})
	}
	if a, b := BrowserOf(&bus.Request{}), BrowserOf(&bus.Request{}); a.ID == b.ID {
		t.Fatal("two new browsers share an id")
	}
}

// A form's CSRF token is its browser's: another browser's token, no token,
// or no cookie is refused.
func TestCheckCSRF(t *testing.T) {
	s := New("https://pinion.example/", nil)
	s.csrf.key = []byte(strings.Repeat("k", 32))
	ctx := context.Background()
	mine, other := Browser{ID: strings.Repeat("a", 43)}, Browser{ID: strings.Repeat("b", 43)}
	token, err := s.CSRFToken(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	otherToken, _ := s.CSRFToken(ctx, other)
	cases := []struct {
		name  string
		b     Browser
		token string
		ok    bool
	}{
		{"its own", mine, token, true},
		{"another browser's", mine, otherToken, false},
		{"none", mine, "", false},
		{"a new browser with a copied token", Browser{ID: mine.ID, IsNew: true}, token, false},
		{"truncated", mine, token[:len(token)-1], false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := s.CheckCSRF(ctx, tc.b, tc.token)
			if err != nil || ok != tc.ok {
				t.Fatalf("%v %v, want %v", ok, err, tc.ok)
			}
		})
	}
}

func TestSetCookie(t *testing.T) {
	b := Browser{ID: strings.Repeat("a", 43)}
	for base, secure := range map[string]bool{"https://pinion.example/": true, "http://localhost:8103/": false} {
		c := New(base, nil).SetCookie(b)
		want := Cookie + "=" + b.ID + "; Path=/; Max-Age=31536000; HttpOnly"
		if secure {
			want += "; Secure"
		}
		if want += "; SameSite=Lax"; c != want {
			t.Errorf("%s: %q, want %q", base, c, want)
		}
	}
}
