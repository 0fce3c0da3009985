package identity

import "time"

// limit is the one rule every limiter of the identity service applies:
// at most max events within window and, when gap is set, none sooner than
// gap after the last. The sign-in limiter (failures per pair and per
// address), the registration limits (per address and per e-mail domain)
// and the password-reset throttle (per person) differ only in their
// limits and in where they keep the times: the first two in the sign-in
// limiter's bounded memory, the reset's in the store, so that every
// identity instance counts a person's reset e-mails alike.
type limit struct {
	max    int
	window time.Duration
	gap    time.Duration
}

// The limits, each named for what it stops.
var (
	// Password guesses at one account from one address, and at any
	// accounts from one address.
	pairLimit    = limit{max: maxFailures, window: failureWindow}
	addressLimit = limit{max: maxAddressFailures, window: failureWindow}
	// Scripted account creation from one address, or with one domain's
	// throwaway addresses.
	registerAddressLimit = limit{max: maxRegistrationsPerAddress, window: failureWindow}
	registerDomainLimit  = limit{max: maxRegistrationsPerDomain, window: failureWindow}
	// Reset e-mails filling one person's mailbox (and spending their
	// last link).
	resetLimit = limit{max: maxResetsPerHour, window: time.Hour, gap: resetGap}
)

// recent are the times in ts (oldest first) still within the window.
func (l limit) recent(ts []time.Time, now time.Time) []time.Time {
	return since(ts, now, l.window)
}

// allows reports whether one more event at now stays within the limit,
// given the times of the events so far (oldest first) and pending ones
// not yet settled, which count as events.
func (l limit) allows(ts []time.Time, pending int, now time.Time) bool {
	ts = l.recent(ts, now)
	if len(ts)+pending >= l.max {
		return false
	}
	return l.gap == 0 || len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= l.gap
}
