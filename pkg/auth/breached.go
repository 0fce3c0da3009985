package auth

import (
	"strings"
	"sync"

	"github.com/trustelem/zxcvbn/frequency"
)

// BreachedText is Medplum's answer for a password found in a breach.
const BreachedText = "Password found in breach database"

// breached holds the passwords most used in leaked password dumps, lower
// case: zxcvbn's list (about 30,000, ranked from the xato.net dump of ten
// million), shipped inside the binary, so the check needs no network. Those
// shorter than any password Pinion accepts are left out.
var breached = sync.OnceValue(func() map[string]struct{} {
	list := frequency.FrequencyLists["passwords"]
	out := make(map[string]struct{}, len(list)/2)
	for _, p := range list {
		if len([]rune(p)) >= 8 {
			out[p] = struct{}{}
		}
	}
	return out
})

// Breached reports whether a password, ignoring case, is one of the
// commonly leaked ones: guessed first by anyone trying passwords.
func Breached(password string) bool {
	_, ok := breached()[strings.ToLower(password)]
	return ok
}
