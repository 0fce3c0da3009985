package bus

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/fhir"
)

func connect(t *testing.T) *nats.Conn {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), MaxPayload: 2 << 20, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := Connect("nats://in-process", "bus-test", ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// A service at its in-flight bound answers 503 with Retry-After at once,
// instead of starting a goroutine per request without end.
func TestServeBoundsInFlight(t *testing.T) {
	nc := connect(t)
	release := make(chan struct{})
	var running, most atomic.Int64
	svc, err := Serve(nc, "slow", "0.0.1", []Endpoint{{"test.slow", Internal, func(ctx context.Context, r *Request) (*Response, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return JSON(200, map[string]bool{"ok": true}), nil
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	const extra = 50
	type answer struct {
		status int
		retry  string
		took   time.Duration
	}
	answers := make(chan answer, MaxInFlight+extra)
	var wg sync.WaitGroup
	for i := 0; i < MaxInFlight+extra; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := Call(ctx, nc, "test.slow", &Request{Method: "GET", Path: "/"})
			if err != nil {
				answers <- answer{status: fhir.AsError(err).Status, took: time.Since(start)}
				return
			}
			answers <- answer{status: resp.Status, retry: resp.Header["Retry-After"], took: time.Since(start)}
		}()
	}
	// The refused answer while the others are held.
	refused := 0
	deadline := time.After(10 * time.Second)
	for refused < extra {
		select {
		case a := <-answers:
			if a.status != 503 || a.retry != "1" {
				t.Fatalf("while full: status %d, Retry-After %q", a.status, a.retry)
			}
			if a.took > 2*time.Second {
				t.Errorf("a refusal took %v", a.took)
			}
			refused++
		case <-deadline:
			t.Fatalf("only %d of %d requests over the bound were refused", refused, extra)
		}
	}
	if m := most.Load(); m > MaxInFlight {
		t.Errorf("%d requests handled at once, over the bound of %d", m, MaxInFlight)
	}
	close(release)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != 200 {
			t.Fatalf("held request answered %d", a.status)
		}
	}
}

// An answer too large for the bus is replaced by a 500 at once; the caller
// does not wait for its deadline.
func TestServeOversizedAnswer(t *testing.T) {
	nc := connect(t)
	svc, err := Serve(nc, "big", "0.0.1", []Endpoint{{"test.big", Internal, func(ctx context.Context, r *Request) (*Response, error) {
		return &Response{Status: 200, Body: bytes.Repeat([]byte("x"), int(nc.MaxPayload())+1)}, nil
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := Call(ctx, nc, "test.big", &Request{Method: "GET", Path: "/"})
	if err != nil {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	if resp.Status != 500 || time.Since(start) > 2*time.Second {
		t.Fatalf("status %d after %v", resp.Status, time.Since(start))
	}
	// And a request too large for the bus is a 413, not a 500.
	_, err = Call(ctx, nc, "test.big", &Request{Method: "POST", Path: "/", Body: make([]byte, nc.MaxPayload()+1)})
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status != 413 {
		t.Fatalf("oversized request: %v", err)
	}
}
