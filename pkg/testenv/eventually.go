package testenv

import (
	"testing"
	"time"
)

// WaitLimit bounds every Eventually: long enough for a loaded CI machine,
// short enough that a condition that never holds fails the test soon.
const WaitLimit = 10 * time.Second

// Eventually polls cond until it holds and fails the test, naming what it
// waited for, when it has not held after WaitLimit. Tests wait on a
// condition this way rather than sleeping for a guessed time.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, WaitLimit, what, cond)
}

// EventuallyWithin is Eventually with its own limit, for a wait that is
// long by design (a receiver down under load, a redelivery's AckWait).
func EventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(pause)
	}
}
