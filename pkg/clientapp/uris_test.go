package clientapp

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

func TestCheckURIs(t *testing.T) {
	long := "https://app.example/" + strings.Repeat("a", MaxURILength)
	many := make([]any, MaxRedirectURIs+1)
	for i := range many {
		many[i] = "https://app.example/cb"
	}
	cases := []struct {
		name string
		res  map[string]any
		expr string // the field refused; "" for none
		text string // part of the refusal
	}{
		{"none", map[string]any{"name": "app"}, "", ""},
		{"https", map[string]any{"redirectUri": "https://app.example/cb"}, "", ""},
		{"http on localhost", map[string]any{"redirectUri": "http://localhost:9615"}, "", ""},
		{"http on 127.0.0.1", map[string]any{"redirectUri": "http://127.0.0.1:8080/cb"}, "", ""},
		{"http on [::1]", map[string]any{"redirectUri": "http://[::1]:8080/cb"}, "", ""},
		{"with a query", map[string]any{"redirectUri": "https://app.example/cb?tenant=a"}, "", ""},
		{"custom scheme, for native apps", map[string]any{"redirectUri": "com.example.app:/cb"}, "", ""},
		{"scheme in capitals", map[string]any{"redirectUri": "HTTPS://APP.example/cb"}, "", ""},
		{"a list", map[string]any{"redirectUris": []any{"https://app.example/1", "com.example.app:/2"}}, "", ""},
		{"an empty list", map[string]any{"redirectUris": []any{}}, "", ""},
		{"both", map[string]any{"redirectUri": "https://app.example/1", "redirectUris": []any{"https://app.example/2"}}, "", ""},
		{"a launch URI", map[string]any{"launchUri": "https://app.example/launch"}, "", ""},
		// A list that is not one is left to the resource's validation.
		{"redirectUris not a list", map[string]any{"redirectUris": "/cb"}, "", ""},

		{"relative", map[string]any{"redirectUri": "/cb"}, "redirectUri", "want an absolute URI without a fragment"},
		{"no scheme", map[string]any{"redirectUri": "app.example/cb"}, "redirectUri", "absolute"},
		{"empty", map[string]any{"redirectUri": ""}, "redirectUri", "absolute"},
		{"null", map[string]any{"redirectUri": nil}, "redirectUri", "absolute"},
		{"a number", map[string]any{"redirectUri": 7}, "redirectUri", "absolute"},
		{"a fragment", map[string]any{"redirectUri": "https://app.example/cb#x"}, "redirectUri", "fragment"},
		{"an empty fragment", map[string]any{"redirectUri": "https://app.example/cb#"}, "redirectUri", "fragment"},
		{"unparsable", map[string]any{"redirectUri": "http://[::1"}, "redirectUri", "absolute"},
		{"javascript", map[string]any{"redirectUri": "javascript:alert(document.cookie)"}, "redirectUri", "javascript:"},
		{"javascript in capitals", map[string]any{"redirectUri": "JavaScript:alert(1)//"}, "redirectUri", "javascript:"},
		{"data", map[string]any{"redirectUri": "data:text/html,<script>alert(1)</script>"}, "redirectUri", "data:"},
		{"vbscript", map[string]any{"redirectUri": "vbscript:msgbox(1)"}, "redirectUri", "vbscript:"},
		{"file", map[string]any{"redirectUri": "file:///etc/passwd"}, "redirectUri", "file:"},
		{"out of band", map[string]any{"redirectUri": "urn:ietf:wg:oauth:2.0:oob"}, "redirectUri", "urn:"},
		{"http elsewhere", map[string]any{"redirectUri": "http://app.example/cb"}, "redirectUri", "loopback"},
		{"http on a name ending in localhost", map[string]any{"redirectUri": "http://localhost.evil.example/cb"}, "redirectUri", "loopback"},
		{"https without a host", map[string]any{"redirectUri": "https:/cb"}, "redirectUri", "host"},
		{"user information", map[string]any{"redirectUri": "https://app.example@evil.example/cb"}, "redirectUri", "user name"},
		{"too long", map[string]any{"redirectUri": long}, "redirectUri", "longer than"},
		{"too many", map[string]any{"redirectUris": many}, "redirectUris", "At most"},
		{"a bad entry in the list", map[string]any{"redirectUris": []any{"https://app.example/1", "javascript:alert(1)"}}, "redirectUris[1]", "javascript:"},
		{"a non-string in the list", map[string]any{"redirectUris": []any{true}}, "redirectUris[0]", "absolute"},
		{"the single one first", map[string]any{"redirectUri": "/1", "redirectUris": []any{"/2"}}, "redirectUri", "absolute"},
		{"a javascript launch URI", map[string]any{"launchUri": "javascript:alert(1)"}, "launchUri", "Invalid launch URI"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckURIs(tc.res)
			if tc.expr == "" {
				if err != nil {
					t.Fatalf("%v, want no error", err)
				}
				return
			}
			fe := fhir.AsError(err)
			if err == nil || fe.Status != 400 || !strings.Contains(fe.Message(), tc.text) {
				t.Fatalf("%v, want 400 saying %q", err, tc.text)
			}
			if got := fe.Outcome.Issue[0].Expression; len(got) != 1 || got[0] != tc.expr {
				t.Fatalf("expression %v, want %q", got, tc.expr)
			}
		})
	}
}
