package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/rss"
)

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// bomb is a body of a few kilobytes that decodes, through Content-Encoding
// "gzip, gzip", to 1 GiB of zeros: a gzip stream may hold many members, so
// the inner layer repeats one member that decodes to 1 MiB.
var bomb = sync.OnceValue(func() []byte {
	member := gzipped(make([]byte, 1<<20))
	inner := bytes.Repeat(member, 1024)
	return gzipped(inner)
})

func post(t *testing.T, url string, body []byte, header map[string]string) (int, map[string]any, http.Header) {
	t.Helper()
	return send(t, "POST", url, body, header)
}

func TestCompressedBodies(t *testing.T) {
	base, nc := startGateway(t, 2*time.Second)
	// A stand-in token endpoint that reports the body it was handed.
	svc, err := micro.AddService(nc, micro.Config{Name: "echo", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	_ = svc.AddEndpoint("token", micro.HandlerFunc(func(r micro.Request) {
		b, _ := json.Marshal(map[string]any{"len": len(r.Data()), "body": string(r.Data())})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("POST", "/oauth2/token")))

	form := []byte("grant_type=client_credentials&client_id=a&client_secret=b")
	var zl, br bytes.Buffer
	zw := zlib.NewWriter(&zl)
	_, _ = zw.Write(form)
	_ = zw.Close()
	bw := brotli.NewWriter(&br)
	_, _ = bw.Write(form)
	_ = bw.Close()

	decoded := []struct {
		name     string
		encoding string
		body     []byte
	}{
		{"identity", "", form},
		{"gzip", "gzip", gzipped(form)},
		{"deflate", "deflate", zl.Bytes()},
		{"br", "br", br.Bytes()},
		{"gzip then br", "gzip, br", func() []byte {
			var b bytes.Buffer
			w := brotli.NewWriter(&b)
			_, _ = w.Write(gzipped(form))
			_ = w.Close()
			return b.Bytes()
		}()},
	}
	for _, tc := range decoded {
		t.Run("decoded/"+tc.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
			if tc.encoding != "" {
				h["Content-Encoding"] = tc.encoding
			}
			st, m, _ := post(t, base+"oauth2/token", tc.body, h)
			if st != 200 || m["body"] != string(form) {
				t.Fatalf("%d %v", st, m)
			}
		})
	}

	refused := []struct {
		name     string
		path     string
		encoding string
		body     []byte
		status   int
	}{
		// Decoding stops at the body limit: 413, and the process barely grows.
		{"bomb on the token endpoint", "oauth2/token", "gzip, gzip", bomb(), 413},
		{"bomb on sign-in", "auth/login", "gzip, gzip", bomb(), 413},
		// Without a token nothing is decoded at all.
		{"bomb without a token", "fhir/R4/Patient", "gzip, gzip", bomb(), 401},
		{"three layers", "oauth2/token", "gzip, gzip, gzip", gzipped(gzipped(gzipped(form))), 415},
		{"unknown encoding", "oauth2/token", "compress", form, 415},
		{"not gzip at all", "oauth2/token", "gzip", form, 400},
		{"truncated gzip", "oauth2/token", "gzip", gzipped(form)[:20], 400},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			stop := rss.Watch(nil)
			start := time.Now()
			st, m, h := post(t, base+tc.path, tc.body, map[string]string{
				"Content-Type": "application/fhir+json", "Content-Encoding": tc.encoding,
			})
			grew := stop()
			t.Logf("status %d in %v, resident memory grew %d MiB", st, time.Since(start).Round(time.Millisecond), grew>>20)
			if st != tc.status || m["resourceType"] != "OperationOutcome" {
				t.Fatalf("status %d, want %d: %v", st, tc.status, m)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff header")
			}
			if grew > 64<<20 {
				t.Fatalf("resident memory grew by %d MiB", grew>>20)
			}
		})
	}
}

func TestHeadersTooLarge(t *testing.T) {
	base, _ := startGateway(t, time.Second)
	// Raw HTTP: Go's client refuses to send headers this large itself.
	conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	big := strings.Repeat("a", 64<<10)
	_, _ = io.WriteString(conn, "GET /fhir/R4/Patient HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 431 || !strings.Contains(string(b), "OperationOutcome") {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no nosniff header")
	}
}
