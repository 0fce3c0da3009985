package identity

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestLimitAllows(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(ds ...time.Duration) []time.Time {
		var ts []time.Time
		for _, d := range ds {
			ts = append(ts, now.Add(-d))
		}
		return ts
	}
	l := limit{max: 3, window: time.Hour, gap: time.Minute}
	for _, c := range []struct {
		name    string
		ts      []time.Time
		pending int
		want    bool
	}{
		{"none yet", nil, 0, true},
		{"under the count", ago(30*time.Minute, 10*time.Minute), 0, true},
		{"at the count", ago(30*time.Minute, 20*time.Minute, 10*time.Minute), 0, false},
		{"pending ones count", ago(30*time.Minute, 10*time.Minute), 1, false},
		{"old ones do not", ago(3*time.Hour, 2*time.Hour, 10*time.Minute), 0, true},
		{"too soon after the last", ago(30 * time.Second), 0, false},
	} {
		if got := l.allows(c.ts, c.pending, now); got != c.want {
			t.Errorf("%s: allows = %v, want %v", c.name, got, c.want)
		}
	}
	if !(limit{max: 1, window: time.Hour}).allows(ago(time.Second+time.Hour), 0, now) {
		t.Error("an event outside the window counted")
	}
}

// withLimit sets one of the shared limits for a test.
func withLimit(t *testing.T, l *limit, to limit) {
	old := *l
	*l = to
	t.Cleanup(func() { *l = old })
}

// The sign-in limiter, the registration limits and the reset throttle are
// one implementation: each decides by its shared limit, so narrowing the
// limit narrows the limiter.
func TestLimitersShareTheLimit(t *testing.T) {
	t.Run("sign-in", func(t *testing.T) {
		withLimit(t, &pairLimit, limit{max: 2, window: failureWindow})
		l := newSigninLimiter()
		for range 2 {
			if err := l.allow("10.8.0.1", "two@example.com"); err != nil {
				t.Fatal(err)
			}
			l.failed("10.8.0.1", "two@example.com")
		}
		expectOutcome(t, l.allow("10.8.0.1", "two@example.com"), 429, "Too Many Requests", "")
	})
	t.Run("registration", func(t *testing.T) {
		withLimit(t, &registerAddressLimit, limit{max: 2, window: failureWindow})
		l := newSigninLimiter()
		for i := range 2 {
			if err := l.register("10.8.0.2", fmt.Sprintf("r%d@d%d.example", i, i)); err != nil {
				t.Fatal(err)
			}
		}
		expectOutcome(t, l.register("10.8.0.2", "late@other.example"), 429, "Too Many Requests", "")
	})
	t.Run("reset", func(t *testing.T) {
		// Two an hour, however far apart: the third is throttled though
		// it comes long after resetGap.
		withLimit(t, &resetLimit, limit{max: 2, window: time.Hour, gap: resetGap})
		p := newPerson(t, "shared-limit")
		at := time.Now()
		for i, want := range []bool{true, true, false} {
			ok, err := live.svc.takeResetSlot(context.Background(), p.userID, at.Add(time.Duration(i)*10*resetGap))
			if err != nil || ok != want {
				t.Fatalf("reset %d: %v %v, want %v", i, ok, err, want)
			}
		}
		// And a gap the shared limit sets is kept.
		withLimit(t, &resetLimit, limit{max: 100, window: time.Hour, gap: 30 * time.Minute})
		q := newPerson(t, "shared-gap")
		for i, want := range []bool{true, false} {
			ok, err := live.svc.takeResetSlot(context.Background(), q.userID, at.Add(time.Duration(i)*20*time.Minute))
			if err != nil || ok != want {
				t.Fatalf("gap reset %d: %v %v, want %v", i, ok, err, want)
			}
		}
	})
}
