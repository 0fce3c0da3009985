package identity

import (
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// signinLimiter slows password guessing without locking the owner out.
// Failures count per (e-mail, client address): after maxFailures within
// failureWindow that pair is refused with 429, so whoever guesses is
// stopped while the owner, signing in from elsewhere, is not. Failures
// also count per client address, for any e-mail: an address that sprays
// many accounts is stopped after maxAddressFailures. The client address is
// the gateway's (behind an ingress, PINION_TRUSTED_PROXIES makes it the
// real client's rather than the ingress's); IPv6 addresses count by /64,
// which one client usually holds whole. A success clears its pair.
//
// Counts are per identity instance and bounded in number (the least
// recently failed keys are forgotten first); the gateway's per-address
// rate limit bounds the rest.
type signinLimiter struct {
	mu       sync.Mutex
	failures *lru.Cache[string, []time.Time]
}

const (
	maxFailures        = 10
	maxAddressFailures = 50
	failureWindow      = 15 * time.Minute
	// limiterKeys bounds the memory of the counts.
	limiterKeys = 100_000
)

func newSigninLimiter() *signinLimiter {
	c, _ := lru.New[string, []time.Time](limiterKeys)
	return &signinLimiter{failures: c}
}

// addressKey groups an address as one client: itself, or its /64.
func addressKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	if a = a.Unmap(); a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func pairKey(ip, email string) string { return "p:" + addressKey(ip) + "|" + email }
func ipKey(ip string) string          { return "a:" + addressKey(ip) }

// recent is a key's failures within the window; l.mu is held.
func (l *signinLimiter) recent(key string, now time.Time) []time.Time {
	ts, _ := l.failures.Peek(key)
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > failureWindow {
		i++
	}
	return ts[i:]
}

// allow refuses an attempt when its pair or its address has failed too often.
func (l *signinLimiter) allow(ip, email string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.recent(pairKey(ip, email), now)) >= maxFailures || len(l.recent(ipKey(ip), now)) >= maxAddressFailures {
		return fhir.TooManyRequests()
	}
	return nil
}

// failed records a failed attempt.
func (l *signinLimiter) failed(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, k := range []string{pairKey(ip, email), ipKey(ip)} {
		ts := l.recent(k, now)
		if len(ts) >= maxAddressFailures {
			ts = ts[1:] // enough to decide; keep the count bounded
		}
		l.failures.Add(k, append(append([]time.Time(nil), ts...), now))
	}
}

// succeeded clears the failures of an e-mail from an address.
func (l *signinLimiter) succeeded(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures.Remove(pairKey(ip, email))
}
