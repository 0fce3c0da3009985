package limits

import (
	"fmt"
	"testing"
	"time"
)

func TestSigninLimiter(t *testing.T) {
	l := NewSignIns()
	for i := 0; i < MaxFailures; i++ {
		if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
			t.Fatalf("refused after %d failures", i)
		}
		l.Failed("10.0.0.1", "a@example.com")
	}
	if err := l.Allow("10.0.0.1", "a@example.com"); err == nil {
		t.Fatal("the guessing address is not slowed")
	}
	// The owner, from elsewhere, is not locked out by someone's guesses.
	if err := l.Allow("10.0.0.2", "a@example.com"); err != nil {
		t.Fatal("the owner is locked out by another address's failures")
	}
	if err := l.Allow("10.0.0.1", "b@example.com"); err != nil {
		t.Fatal("another account is locked by a neighbour's failures")
	}
	l.Succeeded("10.0.0.1", "a@example.com")
	if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
		t.Fatal("a success does not clear the pair's failures")
	}
	// An address spraying many accounts is stopped.
	for i := 0; i < maxAddressFailures; i++ {
		l.Failed("10.0.0.9", fmt.Sprintf("x%d@example.com", i))
	}
	if err := l.Allow("10.0.0.9", "new@example.com"); err == nil {
		t.Fatal("an address spraying many accounts is not slowed")
	}
	// IPv6 counts by /64: rotating addresses within one does not help.
	for i := 0; i < MaxFailures; i++ {
		l.Failed(fmt.Sprintf("2001:db8::%x", i+1), "v6@example.com")
	}
	if err := l.Allow("2001:db8::ffff", "v6@example.com"); err == nil {
		t.Fatal("an IPv6 /64 escapes the limit by changing addresses")
	}
	if err := l.Allow("2001:db8:0:1::1", "v6@example.com"); err != nil {
		t.Fatal("another /64 is refused")
	}
}

// The counts stay bounded however many keys an attacker makes up.
func TestSigninLimiterBounded(t *testing.T) {
	l := NewSignIns()
	for i := 0; i < limiterKeys+1000; i++ {
		l.Failed(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), fmt.Sprintf("u%d@example.com", i))
	}
	if n := l.failures.Len(); n > limiterKeys {
		t.Fatalf("%d keys kept", n)
	}
}

// Failures count within the window only.
func TestSigninLimiterWindow(t *testing.T) {
	l := NewSignIns()
	now := time.Now()
	key := pairKey("10.0.0.1", "a@example.com")
	var ts []time.Time
	for i := 0; i < MaxFailures; i++ {
		ts = append(ts, now.Add(-failureWindow-time.Duration(MaxFailures-i)*time.Second))
	}
	l.failures.Add(key, &attempts{failed: ts})
	if n := len(l.recent(key, now)); n != 0 {
		t.Fatalf("%d failures older than the window count", n)
	}
	if n := len(l.recent(key, ts[MaxFailures-1].Add(failureWindow))); n != 1 {
		t.Fatalf("%d failures at the window's edge, want the last one", n)
	}
	if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
		t.Fatal("old failures still refuse")
	}
}

// An attempt counts from allow, before it is settled: a burst of attempts
// that all pass allow before any fails cannot exceed the budget. A success
// gives its reservation back; one never settled stops counting in time.
func TestSigninLimiterReserves(t *testing.T) {
	l := NewSignIns()
	for i := 0; i < MaxFailures; i++ {
		if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
			t.Fatalf("attempt %d refused", i)
		}
	}
	if err := l.Allow("10.0.0.1", "a@example.com"); err == nil {
		t.Fatal("more attempts in flight than the budget")
	}
	l.Succeeded("10.0.0.1", "a@example.com")
	if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
		t.Fatal("a success did not give its reservation back")
	}
	// An attempt whose check did not finish (a busy server) is released:
	// it counts neither as a failure nor against the budget.
	l.Released("10.0.0.1", "a@example.com")
	if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
		t.Fatal("a released attempt still holds its reservation")
	}
	if n := len(l.recent(pairKey("10.0.0.1", "a@example.com"), time.Now())); n != 0 {
		t.Fatalf("a released attempt counted as %d failures", n)
	}
	// Reservations left by requests that ended in an error expire.
	a, _ := l.failures.Peek(pairKey("10.0.0.1", "a@example.com"))
	for i := range a.pending {
		a.pending[i] = a.pending[i].Add(-pendingLifetime - time.Second)
	}
	if err := l.Allow("10.0.0.1", "a@example.com"); err != nil {
		t.Fatal("unsettled reservations count for ever")
	}
}
