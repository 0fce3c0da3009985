package limits

import "time"

// Rule is the one rule every limiter of the identity service applies: at
// most Max events within Window and, when Gap is set, none sooner than Gap
// after the last. The sign-in limiter (failures per pair and per address),
// the registration limits (per address and per e-mail domain) and the
// password-reset throttle (per person, in package account) differ only in
// their rules and in where they keep the times: the first two in the
// sign-in limiter's bounded memory, the reset's in the store, so that
// every identity instance counts a person's reset e-mails alike.
type Rule struct {
	Max    int
	Window time.Duration
	Gap    time.Duration
}

// The rules of this package's limiters, each named for what it stops.
var (
	// Password guesses at one account from one address, and at any
	// accounts from one address.
	pairRule    = Rule{Max: MaxFailures, Window: failureWindow}
	addressRule = Rule{Max: maxAddressFailures, Window: failureWindow}
	// Scripted account creation from one address, or with one domain's
	// throwaway addresses.
	registerAddressRule = Rule{Max: MaxRegistrationsPerAddress, Window: failureWindow}
	registerDomainRule  = Rule{Max: maxRegistrationsPerDomain, Window: failureWindow}
)

// Recent are the times in ts (oldest first) still within the window.
func (l Rule) Recent(ts []time.Time, now time.Time) []time.Time {
	return since(ts, now, l.Window)
}

// Allows reports whether one more event at now stays within the rule,
// given the times of the events so far (oldest first) and pending ones
// not yet settled, which count as events.
func (l Rule) Allows(ts []time.Time, pending int, now time.Time) bool {
	ts = l.Recent(ts, now)
	if len(ts)+pending >= l.Max {
		return false
	}
	return l.Gap == 0 || len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= l.Gap
}
