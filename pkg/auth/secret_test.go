package auth

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// watchSlots counts hashes waiting for and running in slots; running ones
// hold their slot until gate is closed. It is undone when the test ends.
type slotWatch struct {
	waiting, running, peak atomic.Int64
	gate                   chan struct{}
}

func watchSlots(t *testing.T) *slotWatch {
	w := &slotWatch{gate: make(chan struct{})}
	slotProbe = func(stage string) {
		switch stage {
		case "wait":
			w.waiting.Add(1)
		case "run":
			n := w.running.Add(1)
			for p := w.peak.Load(); n > p && !w.peak.CompareAndSwap(p, n); p = w.peak.Load() {
			}
			<-w.gate
		case "done":
			w.running.Add(-1)
		}
	}
	t.Cleanup(func() { slotProbe = nil })
	return w
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// More hashes than cores asked at once run at most one a core at a time;
// the rest wait for a slot.
func TestHashesBounded(t *testing.T) {
	bound := int64(cap(hashSlots))
	if want := int64(max(1, runtime.GOMAXPROCS(0))); bound != want {
		t.Fatalf("bound %d, want GOMAXPROCS %d", bound, want)
	}
	w := watchSlots(t)
	n := 3*bound + 2
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				_, err := HashPassword(context.Background(), "correct horse")
				errs <- err
				return
			}
			_, err := CheckPassword(context.Background(), DecoyHash(), "correct horse")
			errs <- err
		})
	}
	// Every hash has asked and the slots are full; none beyond them runs.
	waitFor(t, "every hash to ask for a slot and the slots to fill", func() bool {
		return w.waiting.Load() == n && w.running.Load() >= bound
	})
	close(w.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := w.peak.Load(); p > bound {
		t.Fatalf("%d hashes ran at once, bound %d", p, bound)
	}
}

// A hash that gets no slot before its caller's deadline (or hashWait) runs
// not at all and answers 503 with Retry-After.
func TestHashBusy(t *testing.T) {
	w := watchSlots(t)
	bound := int64(cap(hashSlots))
	var wg sync.WaitGroup
	for range bound {
		wg.Go(func() { _, _ = HashPassword(context.Background(), "x") })
	}
	defer func() { close(w.gate); wg.Wait() }()
	waitFor(t, "the slots to fill", func() bool { return w.running.Load() == bound })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := CheckPassword(ctx, DecoyHash(), "x")
	fe := fhir.AsError(err)
	if fe.Status != 503 || fe.Header["Retry-After"] == "" {
		t.Fatalf("a hash with no free slot: %v (status %d, header %v)", err, fe.Status, fe.Header)
	}
	if w.peak.Load() > bound {
		t.Fatal("the refused hash ran")
	}
}

// A stored hash asking argon2 for more than the bound's memory is refused
// unrun.
func TestCheckPasswordBoundsParameters(t *testing.T) {
	for _, h := range []string{
		"$argon2id$v=19$m=4194304,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$a2V5",
		"$argon2id$v=19$m=19456,t=1000,p=1$c2FsdHNhbHRzYWx0c2FsdA$a2V5",
		"$argon2id$v=19$m=19456,t=2,p=0$c2FsdHNhbHRzYWx0c2FsdA$a2V5",
	} {
		if ok, err := CheckPassword(context.Background(), h, "x"); ok || err == nil {
			t.Errorf("%s: %v %v", h, ok, err)
		}
	}
}
