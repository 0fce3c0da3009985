package saga

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// These tests change the package's retry settings: none runs in parallel.

// fastRetries shortens the waits between attempts for one test.
func fastRetries(t *testing.T, backoff ...time.Duration) {
	t.Helper()
	oldBackoff, oldMax := Backoff, MaxDeliver
	Backoff, MaxDeliver = backoff, len(backoff)+1
	t.Cleanup(func() { Backoff, MaxDeliver = oldBackoff, oldMax })
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startSteps opens the step stream on a fresh NATS server.
func startSteps(t *testing.T) jetstream.JetStream {
	t.Helper()
	js := testenv.New(t).JS
	if err := EnsureStream(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	return js
}

// recorder is a step handler's log: the payload and time of each attempt,
// and the dead letters.
type recorder struct {
	mu       sync.Mutex
	attempts map[string][]time.Time
	dead     map[string]error
}

func newRecorder() *recorder {
	return &recorder{attempts: map[string][]time.Time{}, dead: map[string]error{}}
}

// handler records each attempt and answers with fail's error for it (the
// attempt counted from 1).
func (r *recorder) handler(fail func(data string, attempt int) error) Handler {
	return func(_ context.Context, data []byte) error {
		r.mu.Lock()
		r.attempts[string(data)] = append(r.attempts[string(data)], time.Now())
		n := len(r.attempts[string(data)])
		r.mu.Unlock()
		return fail(string(data), n)
	}
}

func (r *recorder) deadLetter(_ context.Context, data []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead[string(data)] = err
}

func (r *recorder) tries(data string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.attempts[data]...)
}

func (r *recorder) deadErr(data string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.dead[data]
	return err, ok
}

func consume(t *testing.T, js jetstream.JetStream, name, subject string, h Handler, dead DeadLetter) {
	t.Helper()
	stop, err := Consume(context.Background(), js, name, subject, h, dead, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

func publish(t *testing.T, js jetstream.JetStream, subject, data, msgID string) {
	t.Helper()
	if err := Publish(context.Background(), js, subject, []byte(data), msgID); err != nil {
		t.Fatal(err)
	}
}

// pending is how many steps the stream still holds.
func pending(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A step published twice under one message id is stored once; handled, it
// leaves the stream.
func TestStepStoredOnceAndRemovedWhenDone(t *testing.T) {
	js := startSteps(t)
	subject := SubjectPrefix + "test.once"
	publish(t, js, subject, "a", "step-a")
	publish(t, js, subject, "a", "step-a")
	if n := pending(t, js); n != 1 {
		t.Fatalf("%d steps stored, want 1", n)
	}
	rec := newRecorder()
	consume(t, js, "test-once", subject, rec.handler(func(string, int) error { return nil }), rec.deadLetter)
	testenv.Eventually(t, "the step to be handled and removed", func() bool {
		return len(rec.tries("a")) == 1 && pending(t, js) == 0
	})
	if _, ok := rec.deadErr("a"); ok {
		t.Error("a step that succeeded went to the dead letters")
	}
}

// A step that fails is delivered again after its backoff until it
// succeeds, and never reaches the dead letters.
func TestStepRetriedWithBackoff(t *testing.T) {
	fastRetries(t, 50*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond)
	js := startSteps(t)
	subject := SubjectPrefix + "test.retry"
	rec := newRecorder()
	consume(t, js, "test-retry", subject, rec.handler(func(_ string, attempt int) error {
		if attempt < 3 {
			return fmt.Errorf("attempt %d: not yet", attempt)
		}
		return nil
	}), rec.deadLetter)
	publish(t, js, subject, "r", "step-r")
	testenv.Eventually(t, "the third attempt to succeed", func() bool { return len(rec.tries("r")) == 3 && pending(t, js) == 0 })
	tries := rec.tries("r")
	for i, wait := range Backoff[:2] {
		if gap := tries[i+1].Sub(tries[i]); gap < wait {
			t.Errorf("attempt %d came %s after the one before, sooner than its backoff %s", i+2, gap, wait)
		}
	}
	if err, ok := rec.deadErr("r"); ok {
		t.Errorf("a step that succeeded at last went to the dead letters: %v", err)
	}
}

// A step that keeps failing is tried MaxDeliver times, then handed to the
// dead letters with its last error and removed.
func TestStepDeadAfterEveryRetry(t *testing.T) {
	fastRetries(t, 10*time.Millisecond, 10*time.Millisecond)
	js := startSteps(t)
	subject := SubjectPrefix + "test.dead"
	rec := newRecorder()
	consume(t, js, "test-dead", subject, rec.handler(func(_ string, attempt int) error {
		return fmt.Errorf("attempt %d failed", attempt)
	}), rec.deadLetter)
	publish(t, js, subject, "d", "step-d")
	testenv.Eventually(t, "the dead letter", func() bool { _, ok := rec.deadErr("d"); return ok })
	err, _ := rec.deadErr("d")
	if got := len(rec.tries("d")); got != MaxDeliver {
		t.Errorf("%d attempts, want MaxDeliver = %d", got, MaxDeliver)
	}
	if want := fmt.Sprintf("attempt %d failed", MaxDeliver); err == nil || err.Error() != want {
		t.Errorf("dead letter's error %v, want %q", err, want)
	}
	testenv.Eventually(t, "the dead step to leave the stream", func() bool { return pending(t, js) == 0 })
}

// A permanent failure goes to the dead letters on its first attempt, its
// cause still there to inspect.
func TestPermanentFailureNotRetried(t *testing.T) {
	fastRetries(t, 10*time.Millisecond, 10*time.Millisecond)
	js := startSteps(t)
	subject := SubjectPrefix + "test.permanent"
	rec := newRecorder()
	conflict := errors.New("409: already a member")
	consume(t, js, "test-permanent", subject, rec.handler(func(string, int) error { return Permanent(conflict) }), rec.deadLetter)
	publish(t, js, subject, "p", "step-p")
	testenv.Eventually(t, "the dead letter", func() bool { _, ok := rec.deadErr("p"); return ok })
	if err, _ := rec.deadErr("p"); !errors.Is(err, conflict) || err.Error() != conflict.Error() {
		t.Errorf("dead letter's error %v, want %v", err, conflict)
	}
	testenv.Eventually(t, "the step to leave the stream", func() bool { return pending(t, js) == 0 })
	if got := len(rec.tries("p")); got != 1 {
		t.Errorf("%d attempts of a permanent failure, want 1", got)
	}
}

// A slow step does not hold up the others.
func TestSlowStepDoesNotBlockOthers(t *testing.T) {
	js := startSteps(t)
	subject := SubjectPrefix + "test.slow"
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // also when the test fails before it
	rec := newRecorder()
	consume(t, js, "test-slow", subject, rec.handler(func(data string, _ int) error {
		if data == "slow" {
			<-release
		}
		return nil
	}), rec.deadLetter)
	publish(t, js, subject, "slow", "step-slow")
	testenv.Eventually(t, "the slow step to start", func() bool { return len(rec.tries("slow")) == 1 })
	publish(t, js, subject, "fast", "step-fast")
	testenv.Eventually(t, "the fast step, while the slow one runs", func() bool { return len(rec.tries("fast")) == 1 })
	unblock()
	testenv.Eventually(t, "both steps to leave the stream", func() bool { return pending(t, js) == 0 })
}

// Instances of a service share one durable consumer: each step is handled
// by one of them, once.
func TestInstancesShareSteps(t *testing.T) {
	js := startSteps(t)
	subject := SubjectPrefix + "test.shared"
	rec := newRecorder()
	h := rec.handler(func(string, int) error { return nil })
	consume(t, js, "test-shared", subject, h, rec.deadLetter)
	consume(t, js, "test-shared", subject, h, rec.deadLetter)
	const n = 40
	for i := range n {
		publish(t, js, subject, fmt.Sprint(i), fmt.Sprint("step-", i))
	}
	testenv.Eventually(t, "every step to be handled", func() bool { return pending(t, js) == 0 })
	for i := range n {
		if got := len(rec.tries(fmt.Sprint(i))); got != 1 {
			t.Errorf("step %d handled %d times, want 1", i, got)
		}
	}
}
