package ratekey

import "testing"

func TestAddress(t *testing.T) {
	cases := []struct{ name, ip, want string }{
		{"ipv4", "10.0.0.1", "10.0.0.1"},
		{"ipv4-mapped ipv6", "::ffff:10.0.0.1", "10.0.0.1"},
		{"ipv6", "2001:db8::1", "2001:db8::/64"},
		{"ipv6 same /64", "2001:db8:0:0:ffff:ffff:ffff:ffff", "2001:db8::/64"},
		{"ipv6 next /64", "2001:db8:0:1::1", "2001:db8:0:1::/64"},
		{"ipv6 zone", "fe80::1%eth0", "fe80::/64"},
		{"loopback", "::1", "::/64"},
		{"not an address", "not an address", "not an address"},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		if got := Address(tc.ip); got != tc.want {
			t.Errorf("%s: Address(%q) = %q, want %q", tc.name, tc.ip, got, tc.want)
		}
	}
}
