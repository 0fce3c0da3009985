package limits

import (
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
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
	l := Rule{Max: 3, Window: time.Hour, Gap: time.Minute}
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
		if got := l.Allows(c.ts, c.pending, now); got != c.want {
			t.Errorf("%s: allows = %v, want %v", c.name, got, c.want)
		}
	}
	if !(Rule{Max: 1, Window: time.Hour}).Allows(ago(time.Second+time.Hour), 0, now) {
		t.Error("an event outside the window counted")
	}
}

// withRule sets one of the package's rules for a test.
func withRule(t *testing.T, l *Rule, to Rule) {
	old := *l
	*l = to
	t.Cleanup(func() { *l = old })
}

// The sign-in limiter and the registration limits are one
// implementation: each decides by its rule, so narrowing the rule
// narrows the limiter.
func TestLimitersShareTheRule(t *testing.T) {
	t.Run("sign-in", func(t *testing.T) {
		withRule(t, &pairRule, Rule{Max: 2, Window: failureWindow})
		l := NewSignIns()
		for range 2 {
			if err := l.Allow("10.8.0.1", "two@example.com"); err != nil {
				t.Fatal(err)
			}
			l.Failed("10.8.0.1", "two@example.com")
		}
		tooMany(t, l.Allow("10.8.0.1", "two@example.com"))
	})
	t.Run("registration", func(t *testing.T) {
		withRule(t, &registerAddressRule, Rule{Max: 2, Window: failureWindow})
		l := NewSignIns()
		for i := range 2 {
			if err := l.Register("10.8.0.2", fmt.Sprintf("r%d@d%d.example", i, i)); err != nil {
				t.Fatal(err)
			}
		}
		tooMany(t, l.Register("10.8.0.2", "late@other.example"))
	})
}

// tooMany checks a refusal is 429 Too Many Requests.
func tooMany(t *testing.T, err error) {
	t.Helper()
	if fe := fhir.AsError(err); err == nil || fe.Status != 429 {
		t.Fatalf("%v, want 429", err)
	}
}
