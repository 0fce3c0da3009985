package bus

import (
	"bytes"
	"context"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/metrics"
)

// A Call to a subject that a service serves on the caller's own connection
// (the standalone stack: the gateway and every service share one) is
// handled in this process instead of crossing NATS: out through the
// connection's writer, through the server, back through its reader and
// the micro dispatcher, and the same for the answer. Those hops were a
// tenth of the server's CPU under a create load, and every hop a
// goroutine's wake-up (issue 38). Everything else is as on the wire: the
// request is encoded and decoded by the same code, from copies the caller
// cannot change, and runs on the service's request goroutines within its
// in-flight bounds, deadline and panic recovery; the answer is held to
// the same size. Requests the wire treats specially (near the payload
// limit, header values with line breaks) still take the wire, and so does
// everything once the service stops.

type localKey struct {
	nc      *nats.Conn
	subject string
}

type localEndpoint struct {
	key localKey
	s   *Service
	h   Handler
}

// locals maps a connection and subject to the endpoint served on it.
var locals sync.Map // localKey → *localEndpoint

// localMargin keeps requests within this much of the payload limit on the
// wire, which measures headers exactly.
const localMargin = 4 << 10

// localFor returns the endpoint serving subject on nc in this process, or nil.
func localFor(nc *nats.Conn, subject string) *localEndpoint {
	if e, ok := locals.Load(localKey{nc, subject}); ok {
		return e.(*localEndpoint)
	}
	return nil
}

// call handles m, encoded for the wire, in process. ok is false when it
// must take the wire instead.
func (e *localEndpoint) call(ctx context.Context, m *nats.Msg) (resp *Response, ok bool, err error) {
	s := e.s
	h, data, ok := ownCopy(m)
	if !ok || int64(len(data)+headerSize(h)+localMargin) > s.nc.MaxPayload() {
		return nil, false, nil
	}
	size := int64(len(data))
	s.mu.RLock()
	if s.stopped {
		s.mu.RUnlock()
		return nil, false, nil
	}
	if !s.admit(size) {
		s.mu.RUnlock()
		metrics.BusOverload.WithLabelValues(e.key.subject).Inc()
		return Outcome(fhir.Busy("Service busy, try again")), true, nil
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	answer := make(chan *Response, 1)
	s.spawn(func() {
		defer s.inflight.Done()
		defer s.release(size)
		hctx, cancel := handlerContext(h)
		defer cancel()
		answer <- s.bounded(e.key.subject, s.run(hctx, e.key.subject, e.h, h, data))
	})
	select {
	case r := <-answer:
		// As DecodeResponse would see it: the caller owns what it gets.
		out := &Response{Status: r.Status, Header: make(map[string]string, len(r.Header)), Body: bytes.Clone(r.Body)}
		for k, v := range r.Header {
			out.Header[k] = v
		}
		return out, true, nil
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// ownCopy copies m's headers and data, which may point into a caller's
// buffers (Fiber's strings live only as long as its handler), so that a
// handler that outlives its caller, or keeps a value, reads its own.
// ok is false for a header value with a line break, which the wire's
// header block does not carry as is.
func ownCopy(m *nats.Msg) (nats.Header, []byte, bool) {
	h := make(nats.Header, len(m.Header))
	for k, vs := range m.Header {
		cp := make([]string, len(vs))
		for i, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				return nil, nil, false
			}
			cp[i] = strings.Clone(v)
		}
		h[strings.Clone(k)] = cp
	}
	return h, bytes.Clone(m.Data), true
}

// serveLocally lets Calls on the service's own connection reach the
// endpoint without NATS.
func (s *Service) serveLocally(subject string, h Handler) {
	e := &localEndpoint{key: localKey{s.nc, subject}, s: s, h: h}
	locals.Store(e.key, e)
	s.locals = append(s.locals, e)
}

// stopLocal turns Calls back to the wire, where the stopped service no
// longer answers.
func (s *Service) stopLocal() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	for _, e := range s.locals {
		locals.CompareAndDelete(e.key, e)
	}
}
