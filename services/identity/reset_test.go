package identity

import "testing"

func TestFormEmail(t *testing.T) {
	cases := []struct {
		raw, email string
		ok         bool
	}{
		{"a@example.com", "a@example.com", true},
		{"  A@Example.COM \n", "a@example.com", true},
		{"alice", "alice", false},
		{" ", "", false},
		{"", "", false},
		// Pages and resets ask for an "@" only; an address that is no one's
		// finds no account.
		{"@", "@", true},
	}
	for _, tc := range cases {
		email, ok := formEmail(tc.raw)
		if email != tc.email || ok != tc.ok {
			t.Errorf("formEmail(%q) = %q %v, want %q %v", tc.raw, email, ok, tc.email, tc.ok)
		}
	}
}
