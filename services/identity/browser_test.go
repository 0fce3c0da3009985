package identity

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
		{"our cookie", browserCookie + "=" + id, true},
		{"among others", "theme=dark; " + browserCookie + "=" + id + "; lang=en", true},
		// Another site's malformed cookie on a shared host must not hide ours.
		{"beside a malformed one", `bad"cookie=x"y; ` + browserCookie + "=" + id, true},
		{"none", "", false},
		{"another name", "pinion_browsers=" + id, false},
		{"too short", browserCookie + "=" + id[:42], false},
		{"too long", browserCookie + "=" + id + "a", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := browserOf(&bus.Request{Header: map[string]string{"Cookie": tc.cookie}})
			if b.isNew == tc.known || (tc.known && b.id != id) {
				t.Fatalf("%+v", b)
			}
			if !tc.known && (len(b.id) != 43 || b.id == id) {
				t.Fatalf("a new browser's id %q", b.id)
			}
		})
	}
	if a, b := browserOf(&bus.Request{}), browserOf(&bus.Request{}); a.id == b.id {
		t.Fatal("two new browsers share an id")
	}
}

// A form's CSRF token is its browser's: another browser's token, no token,
// or no cookie is refused.
func TestCheckCSRF(t *testing.T) {
	s := unwired(t)
	s.csrf = []byte(strings.Repeat("k", 32))
	ctx := context.Background()
	mine, other := browser{id: strings.Repeat("a", 43)}, browser{id: strings.Repeat("b", 43)}
	token, err := s.csrfToken(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	otherToken, _ := s.csrfToken(ctx, other)
	cases := []struct {
		name  string
		b     browser
		token string
		ok    bool
	}{
		{"its own", mine, token, true},
		{"another browser's", mine, otherToken, false},
		{"none", mine, "", false},
		{"a new browser with a copied token", browser{id: mine.id, isNew: true}, token, false},
		{"truncated", mine, token[:len(token)-1], false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := s.checkCSRF(ctx, tc.b, tc.token)
			if err != nil || ok != tc.ok {
				t.Fatalf("%v %v, want %v", ok, err, tc.ok)
			}
		})
	}
}

func TestSetCookie(t *testing.T) {
	b := browser{id: strings.Repeat("a", 43)}
	for base, secure := range map[string]bool{"https://pinion.example/": true, "http://localhost:8103/": false} {
		c := New(Config{BaseURL: base}, nil, nil, nil, nil, nil).setCookie(b)
		want := browserCookie + "=" + b.id + "; Path=/; Max-Age=31536000; HttpOnly"
		if secure {
			want += "; Secure"
		}
		if want += "; SameSite=Lax"; c != want {
			t.Errorf("%s: %q, want %q", base, c, want)
		}
	}
}
