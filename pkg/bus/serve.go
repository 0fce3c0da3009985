package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus/internal/pattern"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/metrics"
)

// QueueGroup is the queue group every service instance joins, so that the
// gateway needs no addresses and instances share the load.
const QueueGroup = "pinion"

// hDeadline carries the caller's deadline (Unix milliseconds), so a service
// stops working on a request nobody waits for any more.
const hDeadline = "Pinion-Deadline"

// Handler serves one endpoint. An error is answered as its OperationOutcome
// (any error that is not a *fhir.Error is a 500 and is logged).
type Handler func(ctx context.Context, r *Request) (*Response, error)

// Service is a running micro service.
type Service struct {
	svc      micro.Service
	nc       *nats.Conn
	log      *slog.Logger
	inflight sync.WaitGroup
	// slots holds one token per request being handled; bytes counts their
	// payloads. Both are bounded, so a burst costs a prompt 503, not
	// unbounded goroutines and memory.
	slots chan struct{}
	bytes atomic.Int64
	// tasks hands a request to an idle request goroutine (workers.go);
	// quit ends the idle ones when the service stops.
	tasks    chan func()
	quit     chan struct{}
	quitOnce sync.Once
	// locals are the endpoints Calls on nc reach in process (local.go);
	// stopped, under mu, turns them back to the wire.
	locals  []*localEndpoint
	mu      sync.RWMutex
	stopped bool
}

// In-flight bounds of one service instance. Requests are mostly small and
// quick; what fills the slots is a slow dependency, and more work queued
// behind it would only time out later.
const (
	MaxInFlight      = 512
	MaxInFlightBytes = 256 << 20
)

// Serve registers the endpoints as a micro service named name in the
// shared queue group, each on its subject (Subject(name, e.Route) for a
// route; an Internal endpoint's Route is its subject). Each request runs
// in its own goroutine: NATS calls a subscription's handler serially, and
// a slow request must not hold up the others. At most MaxInFlight
// requests (MaxInFlightBytes of payload) run at once; beyond that a
// request is answered 503 with Retry-After at once.
func Serve(nc *nats.Conn, name, version string, endpoints []Endpoint, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.Default()
	}
	seen := make(map[string]bool, len(endpoints))
	for _, e := range endpoints {
		if e.Auth.Mode() != Internal {
			if _, _, err := pattern.Parse(e.Route); err != nil {
				return nil, fmt.Errorf("service %s: %w", name, err)
			}
		}
		subject := e.subjectOf(name)
		if seen[subject] || e.Handler == nil {
			return nil, fmt.Errorf("service %s: %s is declared twice or has no handler", name, e.Route)
		}
		seen[subject] = true
	}
	ms, err := micro.AddService(nc, micro.Config{Name: name, Version: version, QueueGroup: QueueGroup})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	s := &Service{svc: ms, nc: nc, log: log.With("service", name), slots: make(chan struct{}, MaxInFlight),
		tasks: make(chan func()), quit: make(chan struct{})}
	for _, e := range endpoints {
		h := e.Handler
		subject := e.subjectOf(name)
		// Endpoint names hold only letters, digits, - and _; the subject keeps the rest.
		err := ms.AddEndpoint(endpointName(subject), micro.HandlerFunc(func(mr micro.Request) {
			size := int64(len(mr.Data()))
			if !s.admit(size) {
				metrics.BusOverload.WithLabelValues(subject).Inc()
				s.reply(subject, mr, Outcome(fhir.Busy("Service busy, try again")))
				return
			}
			s.inflight.Add(1)
			s.spawn(func() {
				defer s.inflight.Done()
				defer s.release(size)
				s.handle(subject, h, mr)
			})
		}), micro.WithEndpointSubject(subject),
			// Generous pending limits: bursts queue here instead of being dropped.
			micro.WithEndpointPendingLimits(1<<16, 256<<20))
		if err != nil {
			_ = ms.Stop()
			s.stopLocal()
			return nil, fmt.Errorf("service %s endpoint %s: %w", name, subject, err)
		}
		s.serveLocally(subject, h)
	}
	return s, nil
}

// admit takes a slot for a request of size bytes, or reports overload.
func (s *Service) admit(size int64) bool {
	select {
	case s.slots <- struct{}{}:
	default:
		return false
	}
	if s.bytes.Add(size) > MaxInFlightBytes && size > 0 {
		s.release(size)
		return false
	}
	return true
}

func (s *Service) release(size int64) {
	s.bytes.Add(-size)
	<-s.slots
}

func (s *Service) handle(subject string, h Handler, mr micro.Request) {
	hdr := nats.Header(mr.Headers())
	ctx, cancel := handlerContext(hdr)
	defer cancel()
	s.reply(subject, mr, s.run(ctx, subject, h, hdr, mr.Data()))
}

// handlerContext is a request's context: until the caller's deadline, or
// a minute when it sent none.
func handlerContext(h nats.Header) (context.Context, context.CancelFunc) {
	if d, err := strconv.ParseInt(h.Get(hDeadline), 10, 64); err == nil {
		return context.WithDeadline(context.Background(), time.UnixMilli(d))
	}
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// reply sends an answer.
func (s *Service) reply(subject string, mr micro.Request, resp *Response) {
	resp = s.bounded(subject, resp)
	if err := mr.Respond(resp.Body, micro.WithHeaders(micro.Headers(EncodeResponse(resp)))); err != nil {
		s.log.Warn("respond failed", "subject", subject, "err", err)
	}
}

// bounded replaces an answer too large for the bus (handlers bound what
// they assemble, so this is a bug) by a 500 at once, so the caller is not
// left waiting for its deadline.
func (s *Service) bounded(subject string, resp *Response) *Response {
	if size := len(resp.Body) + headerSize(EncodeResponse(resp)); int64(size) > s.nc.MaxPayload() {
		s.log.Error("answer too large for the bus", "subject", subject, "bytes", size, "max", s.nc.MaxPayload())
		return Outcome(fhir.Internal())
	}
	return resp
}

func headerSize(h nats.Header) int {
	n := 16 // NATS/1.0 and the blank line
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// ReplyBudget is how large a body an answer on nc may carry, leaving room
// for its headers. Handlers that assemble answers (searches, batches,
// history) stay within it.
func ReplyBudget(nc *nats.Conn) int {
	return int(nc.MaxPayload()) - 64<<10
}

func (s *Service) run(ctx context.Context, subject string, h Handler, hdr nats.Header, data []byte) (resp *Response) {
	req, err := DecodeRequest(hdr, data)
	if err != nil {
		return Outcome(fhir.AsError(err))
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panic", "subject", subject, "request_id", req.RequestID, "trace_id", TraceID(req.Trace), "panic", p, "stack", string(debug.Stack()))
			resp = Outcome(fhir.Internal())
		}
	}()
	resp, err = h(WithTrace(ctx, req.Trace), req)
	if err != nil {
		var fe *fhir.Error
		if !errors.As(err, &fe) {
			s.log.Error("request failed", "subject", subject, "request_id", req.RequestID, "trace_id", TraceID(req.Trace), "err", err)
		}
		return Outcome(fhir.AsError(err))
	}
	if resp == nil {
		return OK()
	}
	return resp
}

// Stop leaves the queue group, then waits (up to the context) for the
// requests already taken to be answered.
func (s *Service) Stop(ctx context.Context) error {
	defer s.quitOnce.Do(func() { close(s.quit) })
	s.stopLocal()
	err := s.svc.Stop()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Call sends a request to a service subject and waits for its answer until
// ctx's deadline. A missing service is 503, a late one 504: a caller never
// hangs.
func Call(ctx context.Context, nc *nats.Conn, subject string, r *Request) (*Response, error) {
	m := EncodeRequest(subject, r)
	if d, ok := ctx.Deadline(); ok {
		m.Header.Set(hDeadline, strconv.FormatInt(d.UnixMilli(), 10))
	}
	start := time.Now()
	var resp *Response
	var err error
	local := false
	if e := localFor(nc, subject); e != nil {
		resp, local, err = e.call(ctx, m)
	}
	if !local {
		var reply *nats.Msg
		if reply, err = nc.RequestMsgWithContext(ctx, m); err == nil {
			resp = DecodeResponse(reply)
		}
	}
	result := "ok"
	defer func() { metrics.Since(metrics.BusDuration.WithLabelValues(subject, result), start) }()
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, nats.ErrNoResponders):
		result = "no-responders"
		return nil, fhir.Unavailable("Service unavailable")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		result = "timeout"
		return nil, fhir.Timeout("")
	case errors.Is(err, nats.ErrMaxPayload):
		result = "too-large"
		return nil, fhir.TooLarge("Request too large")
	default:
		result = "error"
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
}
