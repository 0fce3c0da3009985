package bus

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// goroutineID reads the running goroutine's number from its stack header.
func goroutineID() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// Requests one after another run on one goroutine, which keeps the stack
// the earlier ones grew, and which ends when the service stops.
func TestServeReusesRequestGoroutines(t *testing.T) {
	nc := connect(t)
	ids := make(chan uint64, 20)
	svc, err := Serve(nc, "reuse", "0.0.1", []Endpoint{{"test.reuse", Internal, func(ctx context.Context, r *Request) (*Response, error) {
		ids <- goroutineID()
		return JSON(200, map[string]bool{"ok": true}), nil
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[uint64]bool{}
	for i := 0; i < 20; i++ {
		if resp, err := Call(ctx, nc, "test.reuse", &Request{Method: "GET"}); err != nil || resp.Status != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		seen[<-ids] = true
		// The answer leaves before its goroutine is idle again: wait for
		// its slot to be given back, a moment before it waits for more.
		for deadline := time.Now().Add(5 * time.Second); len(svc.slots) > 0; {
			if time.Now().After(deadline) {
				t.Fatal("the request's slot was never given back")
			}
			runtime.Gosched()
		}
	}
	// Even so a request may now and then find none idle and start another.
	if len(seen) > 10 {
		t.Fatalf("20 requests in a row ran on %d goroutines", len(seen))
	}
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-svc.quit:
	default:
		t.Fatal("the idle goroutines were not told to end")
	}
}
