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
	deadline := time.Now().Add(WaitLimit)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", WaitLimit, what)
		}
		time.Sleep(pause)
	}
}
