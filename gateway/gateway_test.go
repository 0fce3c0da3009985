package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// startGateway runs a gateway on a real NATS server, with a JWKS responder
// standing in for the identity service.
func startGateway(t *testing.T, timeout time.Duration) (string, *nats.Conn) {
	t.Helper()
	return startGatewayWith(t, Config{RequestTimeout: timeout})
}

// startGatewayWith is startGateway with more settings.
func startGatewayWith(t *testing.T, cfg Config) (string, *nats.Conn) {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	ctx := context.Background()
	c, err := infra.Open(ctx, infra.Options{NATSURL: "nats://in-process", InProcess: ns, Name: "gateway-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	key, _ := auth.GenerateKey()
	svc, err := micro.AddService(c.NC, micro.Config{Name: "jwks", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	_ = svc.AddEndpoint("jwks", micro.HandlerFunc(func(r micro.Request) {
		b, _ := json.Marshal(map[string]any{"keys": []auth.JWK{key.PublicJWK()}})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("GET", "/.well-known/jwks.json")))
	view, err := c.Sessions.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	cfg.Addr, cfg.BaseURL, cfg.MaxBodyBytes = "127.0.0.1:0", "http://localhost:8103/", 4096
	g := New(cfg, c.NC, view, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go g.Listen(gctx, ln)
	base := "http://" + ln.Addr().String() + "/"
	testenv.Eventually(t, "the gateway to load its keys", g.ready.Load)
	return base, c.NC
}

func get(t *testing.T, method, url, body string) (int, map[string]any, http.Header) {
	t.Helper()
	return send(t, method, url, []byte(body), map[string]string{"Content-Type": "application/fhir+json"})
}

// send makes one request and decodes a JSON answer.
func send(t *testing.T, method, url string, body []byte, header map[string]string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m, resp.Header
}

func TestGatewayErrors(t *testing.T) {
	base, nc := startGateway(t, 300*time.Millisecond)

	if st, _, _ := get(t, "GET", base+"livez", ""); st != 200 {
		t.Fatalf("livez %d", st)
	}
	if st, _, _ := get(t, "GET", base+"readyz", ""); st != 200 {
		t.Fatalf("readyz %d", st)
	}
	cases := []struct {
		name   string
		setup  func()
		method string
		path   string
		body   string
		status int
	}{
		{"unknown route", nil, "GET", "nothing/here", "", 404},
		{"unknown method on a route", nil, "DELETE", "oauth2/token", "", 404},
		{"no service answers", nil, "GET", "fhir/R4/metadata", "", 503},
		{"service too slow", func() {
			// The service answers only after the test, long past the
			// gateway's 300 ms.
			answer := make(chan struct{})
			t.Cleanup(func() { close(answer) })
			_, _ = nc.Subscribe(bus.SubjectOf("GET", "/fhir/R4/metadata"), func(m *nats.Msg) {
				<-answer
				_ = m.Respond(nil)
			})
			_ = nc.Flush()
		}, "GET", "fhir/R4/metadata", "", 504},
		{"body too large", nil, "POST", "oauth2/token", strings.Repeat("x", 5000), 413},
		{"no token", nil, "GET", "fhir/R4/Patient", "", 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			start := time.Now()
			st, body, hdr := get(t, tc.method, base+tc.path, tc.body)
			if st != tc.status {
				t.Fatalf("status %d, want %d (%v)", st, tc.status, body)
			}
			if body["resourceType"] != "OperationOutcome" {
				t.Fatalf("not an OperationOutcome: %v", body)
			}
			if hdr.Get("X-Request-Id") == "" {
				t.Error("no request id")
			}
			if time.Since(start) > 5*time.Second {
				t.Error("answer took too long")
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	c, err := infra.Open(context.Background(), infra.Options{NATSURL: "nats://in-process", InProcess: ns, Name: "ratelimit-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	view, err := c.Sessions.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	g := New(Config{BaseURL: "http://localhost:8103/", MaxBodyBytes: 4096, RequestTimeout: time.Second, AuthRateLimit: 3},
		c.NC, view, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Listen(ctx, ln)
	url := "http://" + ln.Addr().String() + "/oauth2/token"
	var last http.Header
	for i := 0; i < 3; i++ {
		st, _, h := get(t, "POST", url, "")
		if st == 429 {
			t.Fatalf("limited after %d requests", i)
		}
		if !strings.HasPrefix(h.Get("RateLimit"), `"requests";r=`) {
			t.Fatalf("RateLimit header %q", h.Get("RateLimit"))
		}
		last = h
	}
	_ = last
	st, body, h := get(t, "POST", url, "")
	if st != 429 || body["id"] != "too-many-requests" || !strings.HasPrefix(h.Get("RateLimit"), `"requests";r=0;t=`) {
		t.Fatalf("fourth request: %d %v %q", st, body, h.Get("RateLimit"))
	}
	// Other routes are not limited.
	if st, _, _ := get(t, "GET", "http://"+ln.Addr().String()+"/fhir/R4/Patient", ""); st != 401 {
		t.Fatalf("non-auth route: %d", st)
	}
}
