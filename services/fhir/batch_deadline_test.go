package fhirsvc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// A batch whose time runs out stops: the read running at stopAt is cut off
// (its context ends then) and answered 503, and no later entry runs, the
// write among them included, each answered 503 saying it did not run.
// Writes that do run keep the request's own deadline.
func TestBundleRunOutOfTime(t *testing.T) {
	list := entries(t, `[
		{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
		{"request":{"method":"GET","url":"Patient?name=a"}},
		{"request":{"method":"GET","url":"Patient?name:contains=slow"}},
		{"request":{"method":"GET","url":"Patient?name=b"}},
		{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}}]`)
	b := newBundleRun(base, &bundleRequest{Type: "batch", Entry: list}, 1<<20)
	b.stopAt = time.Now().Add(50 * time.Millisecond)
	var ran []string
	exec := func(ctx context.Context, e batchEntry, _ string) (*bus.Response, error) {
		ran = append(ran, e.Request.URL)
		d, ok := ctx.Deadline()
		switch e.Request.URL {
		case "Patient":
			if ok {
				t.Errorf("a write runs until %v, want the request's own deadline (none)", d)
			}
			return createdAs(e, "p1"), nil
		case "Patient?name:contains=slow":
			// A search that would run past stopAt: its context ends then.
			select {
			case <-ctx.Done():
				return nil, fhir.Unavailable("Search took too long")
			case <-time.After(10 * time.Second):
				return nil, fhir.Conflict("the read was not cut off at stopAt")
			}
		}
		if !ok || !d.Equal(b.stopAt) {
			t.Errorf("a read runs until %v (%v), want stopAt %v", d, ok, b.stopAt)
		}
		return &bus.Response{Status: 200, Body: []byte(`{"resourceType":"Bundle","type":"searchset"}`)}, nil
	}
	wantNoError(t, b.run(context.Background(), exec))
	if want := []string{"Patient", "Patient?name=a", "Patient?name:contains=slow"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %q, want %q", ran, want)
	}
	if got, want := statuses(b), []string{"201 Created", "200 OK", "503 Service Unavailable", "503 Service Unavailable", "503 Service Unavailable"}; !slices.Equal(got, want) {
		t.Fatalf("statuses %q, want %q", got, want)
	}
	wantText(t, b.out[2].Response.Outcome, "Search took too long")
	wantText(t, b.out[3].Response.Outcome, "Entry not run: the batch ran out of time")
	wantText(t, b.out[4].Response.Outcome, "Entry not run: the batch ran out of time")
}

// A transaction whose request's time is spent starts no further entry and
// fails 504.
func TestBundleRunTransactionOutOfTime(t *testing.T) {
	list := entries(t, `[
		{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
		{"request":{"method":"GET","url":"Patient?name=a"}},
		{"resource":{"resourceType":"Patient","id":"x"},"request":{"method":"PUT","url":"Patient/x"}}]`)
	b := newBundleRun(base, &bundleRequest{Type: "transaction", Entry: list}, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ran []string
	exec := func(_ context.Context, e batchEntry, assigned string) (*bus.Response, error) {
		ran = append(ran, e.Request.URL)
		cancel() // the deadline passes while the first entry runs
		return createdAs(e, assigned), nil
	}
	err := b.run(ctx, exec)
	wantError(t, err, 504, "Server timeout", "")
	if want := []string{"Patient"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %q, want %q", ran, want)
	}
	if len(b.created) != 1 {
		t.Fatalf("created %v, want the one create kept for undo", b.created)
	}
}

// The reserve kept for answering is a tenth of the time left, at most 2 s.
func TestAnswerReserve(t *testing.T) {
	for left, want := range map[time.Duration]time.Duration{
		time.Second: 100 * time.Millisecond, 30 * time.Second: 2 * time.Second, 0: 0,
	} {
		if got := answerReserve(left); got != want {
			t.Errorf("answerReserve(%v) = %v, want %v", left, got, want)
		}
	}
}
