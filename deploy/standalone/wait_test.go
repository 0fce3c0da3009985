package standalone

import (
	"testing"
	"time"
)

// waitUntil polls cond until it holds or limit has passed, and reports
// whether it held: the package's one wait on a condition. It fails
// nothing itself, so TestMain and a test's goroutines can use it, and a
// caller can report what it saw last. Each wait names its own limit: they
// run from a request's answer to a cron tick or a cluster's recovery.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// eventually is waitUntil that fails the test, naming what never happened.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(limit, cond) {
		t.Fatalf("waited %s for %s", limit, what)
	}
}
