package limits

import (
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/ratekey"
)

// Registrations are counted on the sign-in limiter, in its window and its
// bounded memory, per client address and per e-mail domain: a script that
// makes accounts from one address, or with one domain's throwaway
// addresses, is stopped without a third party. Generous enough for a
// clinic's patients signing up from one office or one mail provider.
const (
	MaxRegistrationsPerAddress = 20
	maxRegistrationsPerDomain  = 100
)

func registerAddressKey(ip string) string   { return "r:a:" + ratekey.Address(ip) }
func registerDomainKey(email string) string { return "r:d:" + email[strings.LastIndex(email, "@")+1:] }

// Register counts a registration from ip for email (already normalised),
// or refuses it with 429 when either count is full; a refused one counts
// nothing.
func (l *SignIns) Register(ip, email string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	limits := []struct {
		key  string
		rule Rule
	}{{registerAddressKey(ip), registerAddressRule}, {registerDomainKey(email), registerDomainRule}}
	for _, lim := range limits {
		if !lim.rule.Allows(l.attempts(lim.key, now, false).failed, 0, now) {
			return fhir.TooManyRequests()
		}
	}
	for _, lim := range limits {
		a := l.attempts(lim.key, now, true)
		a.failed = append(a.failed, now)
	}
	return nil
}
