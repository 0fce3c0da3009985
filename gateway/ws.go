package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/ratekey"
)

// WebSocket subscriptions, as Medplum serves them on /ws/subscriptions-r4
// (packages/server/src/subscriptions/websockets.ts) for @medplum/core's
// SubscriptionManager: the client binds a socket to a subscription with
// the token $get-ws-binding-token gave it, and receives each matching
// change as an event-notification Bundle, a handshake when bound and a
// heartbeat every wsHeartbeat. botexec matches changes to subscriptions
// and publishes the notifications (bus.WSSubject); a gateway forwards
// those of the subscriptions its sockets are bound to.

// wsMaxSockets bounds the sockets one gateway holds open (each holds two
// goroutines and its bindings), and wsMaxSocketsPerAddress those of one
// client address, so that one client cannot take them all (a socket is
// anonymous until it binds). Past either, a new one is refused with 503.
var (
	wsMaxSockets           = 10_000
	wsMaxSocketsPerAddress = 256
)

// wsCount counts the open sockets, in all and by client address as
// ratekey.Address groups it (an IPv6 address by its /64).
type wsCount struct {
	mu     sync.Mutex
	total  int
	byAddr map[string]int
}

// admits reports whether one more socket from addr stays within bounds.
func (w *wsCount) admits(addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total < wsMaxSockets && w.byAddr[ratekey.Address(addr)] < wsMaxSocketsPerAddress
}

// add counts d more sockets from addr (d is 1 or -1).
func (w *wsCount) add(addr string, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byAddr == nil {
		w.byAddr = map[string]int{}
	}
	w.total += d
	key := ratekey.Address(addr)
	if w.byAddr[key] += d; w.byAddr[key] <= 0 {
		delete(w.byAddr, key)
	}
}

// Bounds of one socket.
const (
	wsHeartbeat   = 10 * time.Second
	wsIdle        = 2 * time.Minute // the client pings every 5 s
	wsMaxMessage  = 16 << 10
	wsMaxBindings = 64
	wsWriteWait   = 10 * time.Second
)

// wsClientMsg is what a client sends: ping, bind-with-token,
// unbind-from-token.
type wsClientMsg struct {
	Type    string `json:"type"`
	Payload struct {
		Token string `json:"token"`
	} `json:"payload"`
}

// wsRoutes serves the subscription socket.
func (g *Gateway) wsRoutes(a *fiber.App) {
	a.Use("/ws/subscriptions-r4", func(c *fiber.Ctx) error {
		if !websocket.IsWebSocketUpgrade(c) {
			return fhir.UpgradeRequired()
		}
		remote := g.clientIP(c)
		if !g.sockets.admits(remote) {
			return fhir.Busy("Too many WebSocket connections")
		}
		c.Locals("remote", remote)
		return c.Next()
	})
	a.Get("/ws/subscriptions-r4", websocket.New(g.subscriptionSocket, websocket.Config{
		ReadBufferSize: 4096, WriteBufferSize: 4096,
	}))
}

// wsSocket is one client's socket and its bindings.
type wsSocket struct {
	g      *Gateway
	c      *websocket.Conn
	remote string
	mu     sync.Mutex // writes and bindings
	bound  map[string]*wsBinding
}

type wsBinding struct {
	sub              *nats.Subscription
	loginID, tokenID string
}

func (g *Gateway) subscriptionSocket(c *websocket.Conn) {
	remote, _ := c.Locals("remote").(string)
	g.sockets.add(remote, 1)
	defer g.sockets.add(remote, -1)
	s := &wsSocket{g: g, c: c, remote: remote, bound: map[string]*wsBinding{}}
	defer s.close()
	c.SetReadLimit(wsMaxMessage)
	stop := make(chan struct{})
	defer close(stop)
	go s.heartbeats(stop)
	for {
		_ = c.SetReadDeadline(time.Now().Add(wsIdle))
		_, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		var msg wsClientMsg
		if err := json.Unmarshal(data, &msg); err != nil {
			s.send(fhir.BadRequest("Invalid message").Outcome)
			continue
		}
		switch msg.Type {
		case "ping":
			s.send(map[string]string{"type": "pong"})
		case "bind-with-token":
			s.bind(msg.Payload.Token)
		case "unbind-from-token":
			if id, _, _, ok := s.verify(msg.Payload.Token); ok {
				s.unbind(id)
			}
		default:
			s.send(fhir.BadRequest("Unknown message type").Outcome)
		}
	}
}

// verify reads a binding token: the subscription it binds and its login,
// which must still count. A refusal is sent to the client.
func (s *wsSocket) verify(tok string) (subscription, loginID, tokenID string, ok bool) {
	claims, err := s.g.verify(tok)
	if err != nil {
		s.send(fhir.BadRequest("Token failed to validate. Check token expiry.").Outcome)
		return "", "", "", false
	}
	if claims.SubscriptionID == "" {
		s.send(fhir.BadRequest("Token claims missing subscription_id. Make sure you are sending the correct token.").Outcome)
		return "", "", "", false
	}
	if _, err := s.g.principal(context.Background(), claims.LoginID, claims.ID, s.remote); err != nil || s.g.sessions.Revoked(claims.ID) {
		s.send(fhir.Unauthorized().Outcome)
		return "", "", "", false
	}
	return claims.SubscriptionID, claims.LoginID, claims.ID, true
}

// bind starts forwarding a subscription's notifications and answers with
// the handshake.
func (s *wsSocket) bind(tok string) {
	id, loginID, tokenID, ok := s.verify(tok)
	if !ok {
		return
	}
	s.mu.Lock()
	if _, done := s.bound[id]; !done {
		if len(s.bound) >= wsMaxBindings {
			s.mu.Unlock()
			s.send(fhir.BadRequest("Too many subscriptions on one socket").Outcome)
			return
		}
		b := &wsBinding{loginID: loginID, tokenID: tokenID}
		sub, err := s.g.nc.Subscribe(bus.WSSubject(id), func(m *nats.Msg) { s.forward(b, m.Data) })
		if err != nil {
			s.mu.Unlock()
			s.g.log.Error("websocket binding", "subscription", id, "err", err)
			s.send(fhir.Internal().Outcome)
			return
		}
		b.sub = sub
		s.bound[id] = b
	}
	s.mu.Unlock()
	s.send(statusBundle("handshake", []string{id}))
}

// forward sends a notification while the binding's login still counts.
func (s *wsSocket) forward(b *wsBinding, notification []byte) {
	if _, err := s.g.principal(context.Background(), b.loginID, b.tokenID, s.remote); err != nil || s.g.sessions.Revoked(b.tokenID) {
		return
	}
	s.write(notification)
}

func (s *wsSocket) unbind(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bound[id]; ok {
		s.release(id, b)
	}
}

func (s *wsSocket) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.bound {
		s.release(id, b)
	}
}

// release stops forwarding a subscription's notifications and tells
// botexec that the subscription has ended.
func (s *wsSocket) release(id string, b *wsBinding) {
	_ = b.sub.Unsubscribe()
	delete(s.bound, id)
	if err := s.g.nc.Publish(bus.SubjWSUnbound, []byte(id)); err != nil {
		s.g.log.Warn("websocket unbinding not announced", "subscription", id, "err", err)
	}
}

// heartbeats sends a heartbeat Bundle for the bound subscriptions until
// stop closes.
func (s *wsSocket) heartbeats(stop chan struct{}) {
	t := time.NewTicker(wsHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.mu.Lock()
			ids := make([]string, 0, len(s.bound))
			for id := range s.bound {
				ids = append(ids, id)
			}
			s.mu.Unlock()
			if len(ids) > 0 {
				s.send(statusBundle("heartbeat", ids))
			}
		case <-stop:
			return
		}
	}
}

func (s *wsSocket) send(v any) {
	b, err := json.Marshal(v)
	if err == nil {
		s.write(b)
	}
}

func (s *wsSocket) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.c.SetWriteDeadline(time.Now().Add(wsWriteWait))
	_ = s.c.WriteMessage(websocket.TextMessage, b)
}

// statusBundle is a handshake or heartbeat: a history Bundle of one
// SubscriptionStatus per subscription.
func statusBundle(typ string, ids []string) map[string]any {
	entries := make([]any, len(ids))
	for i, id := range ids {
		entries[i] = map[string]any{"resource": map[string]any{
			"resourceType": "SubscriptionStatus", "id": uuid.NewString(), "status": "active", "type": typ,
			"subscription": map[string]any{"reference": "Subscription/" + id},
		}}
	}
	return map[string]any{
		"resourceType": "Bundle", "id": uuid.NewString(), "type": "history",
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "entry": entries,
	}
}
