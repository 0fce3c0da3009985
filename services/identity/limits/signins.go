// Package limits holds the identity service's limiters: failed sign-ins
// per (e-mail, address) and per address, registrations per address and
// per e-mail domain, all under one rule (Rule), which the reset throttle
// (package account) applies too.
package limits

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/ratekey"
)

// SignIns slows password guessing without locking the owner out.
// Failures count per (e-mail, client address): after MaxFailures within
// failureWindow that pair is refused with 429, so whoever guesses is
// stopped while the owner, signing in from elsewhere, is not. Failures
// also count per client address, for any e-mail: an address that sprays
// many accounts is stopped after maxAddressFailures. The client address is
// the gateway's (behind an ingress, PINION_TRUSTED_PROXIES makes it the
// real client's rather than the ingress's), counted as ratekey.Address
// counts it (IPv6 by /64). A success clears its pair.
//
// An attempt counts from the moment it is allowed, before its password is
// hashed: allow reserves it as pending and failed or succeeded settles it.
// Otherwise any number of concurrent guesses would pass allow before the
// first of them failed. An attempt whose check did not finish is released;
// one never settled at all stops counting after pendingLifetime.
//
// Counts are per identity instance and bounded in number (the least
// recently failed keys are forgotten first); the gateway's per-address
// rate limit bounds the rest.
type SignIns struct {
	mu       sync.Mutex
	failures *lru.Cache[string, *attempts]
}

// attempts are one key's failures within the window and attempts still
// pending, each oldest first.
type attempts struct {
	failed, pending []time.Time
}

const (
	MaxFailures        = 10
	maxAddressFailures = 50
	failureWindow      = 15 * time.Minute
	// pendingLifetime outlasts any request (the bus's deadline is shorter).
	pendingLifetime = 2 * time.Minute
	// limiterKeys bounds the memory of the counts.
	limiterKeys = 100_000
)

func NewSignIns() *SignIns {
	c, _ := lru.New[string, *attempts](limiterKeys)
	return &SignIns{failures: c}
}

func pairKey(ip, email string) string { return "p:" + ratekey.Address(ip) + "|" + email }
func ipKey(ip string) string          { return "a:" + ratekey.Address(ip) }

// since drops the times in ts (oldest first) older than d before now.
func since(ts []time.Time, now time.Time, d time.Duration) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > d {
		i++
	}
	return ts[i:]
}

// attempts is a key's counts with the old ones dropped; l.mu is held. A new
// key is stored only when add is set.
func (l *SignIns) attempts(key string, now time.Time, add bool) *attempts {
	a, ok := l.failures.Get(key)
	if !ok {
		a = &attempts{}
		if add {
			l.failures.Add(key, a)
		}
	}
	a.failed = since(a.failed, now, failureWindow)
	a.pending = since(a.pending, now, pendingLifetime)
	return a
}

// recent is a key's failures within the window; l.mu is held.
func (l *SignIns) recent(key string, now time.Time) []time.Time {
	a, ok := l.failures.Peek(key)
	if !ok {
		return nil
	}
	return since(a.failed, now, failureWindow)
}

// Allow refuses an attempt when its pair or its address has failed too
// often, counting attempts still pending as failures; else it reserves the
// attempt, which failed or succeeded then settles.
func (l *SignIns) Allow(ip, email string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	pair, addr := l.attempts(pairKey(ip, email), now, false), l.attempts(ipKey(ip), now, false)
	if !pairRule.Allows(pair.failed, len(pair.pending), now) || !addressRule.Allows(addr.failed, len(addr.pending), now) {
		return fhir.TooManyRequests()
	}
	for _, k := range []string{pairKey(ip, email), ipKey(ip)} {
		a := l.attempts(k, now, true)
		a.pending = append(a.pending, now)
	}
	return nil
}

// Failed records a failed attempt, settling its reservation.
func (l *SignIns) Failed(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, k := range []string{pairKey(ip, email), ipKey(ip)} {
		a := l.attempts(k, now, true)
		a.pending = settle(a.pending)
		if len(a.failed) >= maxAddressFailures {
			a.failed = a.failed[1:] // enough to decide; keep the count bounded
		}
		a.failed = append(a.failed, now)
	}
}

// Released settles an attempt that was neither a failure nor a success:
// its check did not run or did not finish (the server was busy, the store
// failed, the address is blocked). It counts as nothing.
func (l *SignIns) Released(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, k := range []string{pairKey(ip, email), ipKey(ip)} {
		a := l.attempts(k, now, false)
		a.pending = settle(a.pending)
	}
}

// Succeeded settles an attempt and clears the failures of its e-mail from
// its address.
func (l *SignIns) Succeeded(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, k := range []string{pairKey(ip, email), ipKey(ip)} {
		a := l.attempts(k, now, false)
		a.pending = settle(a.pending)
	}
	if pair := l.attempts(pairKey(ip, email), now, false); len(pair.pending) == 0 {
		l.failures.Remove(pairKey(ip, email))
	} else {
		pair.failed = nil
	}
}

// settle ends one pending attempt: the oldest, which is the first to stop
// counting anyway, so the rest count as long as they should.
func settle(pending []time.Time) []time.Time {
	if len(pending) == 0 {
		return pending
	}
	return pending[1:]
}

// Failures is how many recent failures the pair (ip, email) has, for a
// test or a log line.
func (l *SignIns) Failures(ip, email string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recent(pairKey(ip, email), time.Now()))
}

// Keys is how many keys the limiter remembers.
func (l *SignIns) Keys() int { return l.failures.Len() }
