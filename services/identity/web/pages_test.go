package web

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// Every page carries the same protective headers; a browser without the
// cookie gets one.
func TestRender(t *testing.T) {
	s := New("https://pinion.example/", nil)
	for _, tc := range []struct {
		name   string
		b      Browser
		cookie bool
	}{
		{"known browser", Browser{ID: strings.Repeat("a", 43)}, false},
		{"new browser", Browser{ID: strings.Repeat("b", 43), IsNew: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.Message(418, tc.b, "Title & more", "https://pinion.example/x", "Go", "First <line>", "Second")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP, "X-Frame-Options": "DENY",
				"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
			}
			if tc.cookie {
				want["Set-Cookie"] = s.SetCookie(tc.b)
			}
			if resp.Status != 418 || !reflect.DeepEqual(resp.Header, want) {
				t.Fatalf("%d %v", resp.Status, resp.Header)
			}
			body := string(resp.Body)
			for _, part := range []string{"Title &amp; more", "First &lt;line&gt;", "Second", `href="https://pinion.example/x"`} {
				if !strings.Contains(body, part) {
					t.Fatalf("no %q in:\n%s", part, body)
				}
			}
		})
	}
}

// A posted form must be a form, readable, and carry its browser's token.
func TestForm(t *testing.T) {
	s := New("https://pinion.example/", nil)
	s.csrf.key = make([]byte, 32)
	ctx := context.Background()
	b := Browser{ID: strings.Repeat("a", 43)}
	token, err := s.CSRFToken(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	const form = "application/x-www-form-urlencoded"
	cases := []struct {
		name, contentType, body string
		b                       Browser
		status                  int
		title                   string
	}{
		{"good", form, "csrf=" + token + "&email=a%40example.com", b, 0, ""},
		{"good, with a charset", form + "; charset=UTF-8", "csrf=" + token, b, 0, ""},
		{"JSON", "application/json", `{"csrf":"` + token + `"}`, b, 415, "Not a form"},
		{"unreadable", form, "csrf=" + token + "&x=%zz", b, 400, "Not a form"},
		{"no token", form, "email=a%40example.com", b, 403, "Form expired"},
		{"another browser's token", form, "csrf=" + token, Browser{ID: strings.Repeat("b", 43)}, 403, "Form expired"},
		{"no cookie", form, "csrf=" + token, Browser{ID: b.ID, IsNew: true}, 403, "Form expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, resp, err := s.Form(ctx, &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)}, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if tc.status == 0 {
				if v == nil || resp != nil || v.Get("csrf") != token {
					t.Fatalf("%v %v", v, resp)
				}
				return
			}
			if v != nil || resp.Status != tc.status || !strings.Contains(string(resp.Body), tc.title) {
				t.Fatalf("%v %d:\n%s", v, resp.Status, resp.Body)
			}
		})
	}
}
