package egress

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

func TestPublicAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1:248:1893:25c8:1946": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "0.0.0.0": false, "100.64.0.1": false,
		"::ffff:127.0.0.1": false, "224.0.0.1": false, "64:ff9b::7f00:1": false, "::": false, "ff02::1": false,
	} {
		if got := PublicAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("PublicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A loopback server is refused at dial time unless private addresses are
// allowed, and a redirect is answered as it is, not followed.
func TestClient(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/", http.StatusFound)
			return
		}
		w.WriteHeader(204)
	}))
	defer srv.Close()

	if _, err := Client(false, time.Second).Get(srv.URL); !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("loopback: %v, want ErrPrivateAddress", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the refused request reached the server")
	}
	c := Client(true, time.Second)
	resp, err := c.Get(srv.URL + "/moved")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.Load() != 1 {
		t.Fatalf("redirect: %d after %d requests, want 302 after 1", resp.StatusCode, hits.Load())
	}
}
