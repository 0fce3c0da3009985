package webstyle

import "testing"

func TestCSPHash(t *testing.T) {
	// printf 'a{}' | openssl dgst -sha256 -binary | base64
	if got, want := CSPHash("a{}"), "X1RutGBrXCt9KkSaXMK7tHftWiRscFHOhxsS8tv8hBk="; got != want {
		t.Fatalf("CSPHash = %s, want %s", got, want)
	}
}
