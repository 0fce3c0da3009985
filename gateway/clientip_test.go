package gateway

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
)

// The client address a service is told: the TCP peer, unless the peer is a
// trusted proxy, whose X-Forwarded-For is read from the right, past the
// trusted hops. A client cannot choose its address by sending the header.
func TestClientIP(t *testing.T) {
	remoteOf := func(t *testing.T, trusted []netip.Prefix) func(xff string) string {
		base, nc := startGatewayWith(t, Config{RequestTimeout: 2 * time.Second, TrustedProxies: trusted})
		svc, err := micro.AddService(nc, micro.Config{Name: "remote", Version: "0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		_ = svc.AddEndpoint("token", micro.HandlerFunc(func(r micro.Request) {
			req, _ := bus.DecodeRequest(natsHeader(r), r.Data())
			b, _ := json.Marshal(map[string]string{"remote": req.Remote})
			_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
		}), micro.WithEndpointSubject(bus.SubjectOf("POST", "/oauth2/token")))
		return func(xff string) string {
			h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
			if xff != "" {
				h["X-Forwarded-For"] = xff
			}
			st, m, _ := post(t, base+"oauth2/token", []byte("grant_type=client_credentials"), h)
			if st != 200 {
				t.Fatalf("status %d: %v", st, m)
			}
			return m["remote"].(string)
		}
	}
	t.Run("no trusted proxies", func(t *testing.T) {
		remote := remoteOf(t, nil)
		for _, xff := range []string{"", "203.0.113.7", "203.0.113.7, 198.51.100.1"} {
			if got := remote(xff); got != "127.0.0.1" {
				t.Errorf("X-Forwarded-For %q: %s, want the peer", xff, got)
			}
		}
	})
	t.Run("behind a trusted proxy", func(t *testing.T) {
		remote := remoteOf(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")})
		cases := map[string]string{
			"":                                "127.0.0.1",
			"203.0.113.7":                     "203.0.113.7",
			"6.6.6.6, 203.0.113.7":            "203.0.113.7", // the left part is the client's to write
			"203.0.113.7, 10.1.2.3":           "203.0.113.7", // past our own proxies
			"203.0.113.7,10.1.2.3, 127.0.0.2": "203.0.113.7",
			"garbage, 203.0.113.7":            "203.0.113.7",
			"203.0.113.7, garbage":            "127.0.0.1",
			"2001:db8::1":                     "2001:db8::1",
			"::ffff:203.0.113.9":              "203.0.113.9",
			"10.9.9.9":                        "10.9.9.9", // all trusted: the farthest
		}
		for xff, want := range cases {
			if got := remote(xff); got != want {
				t.Errorf("X-Forwarded-For %q: %s, want %s", xff, got, want)
			}
		}
	})
}

func natsHeader(r micro.Request) nats.Header { return nats.Header(r.Headers()) }
