package identity

import (
	"sync"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// signinLimiter slows password guessing: after maxFailures failed sign-ins
// for one e-mail (from anywhere) or from one address (for any e-mail)
// within failureWindow, further attempts are refused with 429 until the
// window passes. It is per identity instance; the gateway's per-IP rate
// limit bounds the rest.
type signinLimiter struct {
	mu       sync.Mutex
	failures map[string][]time.Time
}

const (
	maxFailures   = 10
	failureWindow = 15 * time.Minute
)

func newSigninLimiter() *signinLimiter { return &signinLimiter{failures: map[string][]time.Time{}} }

func (l *signinLimiter) recent(key string, now time.Time) []time.Time {
	ts := l.failures[key]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > failureWindow {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(l.failures, key)
	} else {
		l.failures[key] = ts
	}
	return ts
}

// allow refuses an attempt when either key has failed too often.
func (l *signinLimiter) allow(ip, email string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.recent("e:"+email, now)) >= maxFailures || len(l.recent("ip:"+ip, now)) >= maxFailures*5 {
		return fhir.TooManyRequests()
	}
	return nil
}

// failed records a failed attempt.
func (l *signinLimiter) failed(ip, email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.failures["e:"+email] = append(l.recent("e:"+email, now), now)
	l.failures["ip:"+ip] = append(l.recent("ip:"+ip, now), now)
}

// succeeded clears an e-mail's failures.
func (l *signinLimiter) succeeded(email string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, "e:"+email)
}
