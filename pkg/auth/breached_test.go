package auth

import "testing"

func TestBreached(t *testing.T) {
	for _, tc := range []struct {
		password string
		want     bool
	}{
		{"password", true},
		{"Password", true}, // case does not help
		{"12345678", true},
		{"trustno1", true},
		{"correct horse battery staple", false},
		{"a long registered password", false},
	} {
		if got := Breached(tc.password); got != tc.want {
			t.Errorf("Breached(%q) = %v, want %v", tc.password, got, tc.want)
		}
	}
}
