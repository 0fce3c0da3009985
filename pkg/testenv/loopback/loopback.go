// Package loopback finds free addresses on the loopback interface for
// tests that start servers of their own (NATS routes, child processes).
// It imports nothing of Pinion's, so the tests of every package can use
// it, testenv's own parts included.
package loopback

import (
	"net"
	"strconv"
	"testing"
)

// FreePort is a loopback port nothing listens on at the moment.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as an address, "127.0.0.1:<port>".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
