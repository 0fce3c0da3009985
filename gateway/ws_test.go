package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// dialWS opens a subscription socket on the gateway at base.
func dialWS(t *testing.T, base string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"ws/subscriptions-r4", nil)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

func readJSON(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var m map[string]any
	if err := c.ReadJSON(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The socket speaks Medplum's protocol and refuses what it cannot use.
func TestSubscriptionSocket(t *testing.T) {
	base, _ := startGateway(t, 5*time.Second)
	if st, body, _ := get(t, "GET", base+"ws/subscriptions-r4", ""); st != 426 || body["resourceType"] != "OperationOutcome" {
		t.Fatalf("plain GET: %d %v", st, body)
	}
	c, _, err := dialWS(t, base)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.WriteJSON(map[string]any{"type": "ping"})
	if m := readJSON(t, c); m["type"] != "pong" {
		t.Fatalf("ping answered %v", m)
	}
	for _, tok := range []string{"not-a-token", strings.Repeat("x", maxTokenLen+1)} {
		_ = c.WriteJSON(map[string]any{"type": "bind-with-token", "payload": map[string]any{"token": tok}})
		m := readJSON(t, c)
		b, _ := json.Marshal(m)
		if m["resourceType"] != "OperationOutcome" || !strings.Contains(string(b), "Token failed to validate") {
			t.Fatalf("bad token (%d bytes) answered %s", len(tok), b)
		}
	}
	_ = c.WriteMessage(websocket.TextMessage, []byte("{"))
	if m := readJSON(t, c); m["resourceType"] != "OperationOutcome" {
		t.Fatalf("malformed message answered %v", m)
	}
}

// Past wsMaxSockets open sockets, or wsMaxSocketsPerAddress from one
// client address, another is refused with 503.
func TestSubscriptionSocketsAreBounded(t *testing.T) {
	for name, bound := range map[string]*int{"in all": &wsMaxSockets, "per address": &wsMaxSocketsPerAddress} {
		t.Run(name, func(t *testing.T) {
			saved := *bound
			*bound = 1
			t.Cleanup(func() { *bound = saved })
			base, _ := startGateway(t, 5*time.Second)
			c, _, err := dialWS(t, base)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.WriteJSON(map[string]any{"type": "ping"})
			readJSON(t, c) // the first socket is open and counted
			_, resp, err := dialWS(t, base)
			if err == nil || resp == nil || resp.StatusCode != 503 {
				t.Fatalf("second socket: %v %v", err, resp)
			}
			c.Close()
			testenv.Eventually(t, "a closed socket to stop counting", func() bool {
				_, _, err := dialWS(t, base)
				return err == nil
			})
		})
	}
}
