package auth

import (
	"bufio"
	"context"
	"crypto/sha1" //nolint:gosec // the range API's protocol names SHA-1; no secret rests on it
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Bounds of one range request: Have I Been Pwned answers within a few
// hundred milliseconds with some 40 KB (about 1,000 lines, padded); a range
// service slower or larger than this is treated as unavailable.
const (
	breachRangeTimeout = 3 * time.Second
	maxBreachRangeBody = 1 << 20
)

// BreachRange asks a k-anonymity range API, such as Have I Been Pwned's
// Pwned Passwords (https://api.pwnedpasswords.com/range/), whether a
// password appears in a breach: only the first 5 hex digits of the
// password's SHA-1 leave the server, and the suffixes of every breached
// hash with that prefix come back (SUFFIX:COUNT lines), matched here.
type BreachRange struct {
	url    string // the prefix is appended
	client *http.Client
}

// NewBreachRange is a checker for the range API at url, to which a hash
// prefix is appended ("https://api.pwnedpasswords.com/range/"); nil when
// url is empty, which turns the check off.
func NewBreachRange(url string) *BreachRange {
	if url == "" {
		return nil
	}
	return &BreachRange{url: url, client: &http.Client{Timeout: breachRangeTimeout}}
}

// Breached reports whether the range API lists the password's hash. An
// error means the service could not be asked or answered nonsense; the
// caller decides what that means (Pinion's identity service lets the
// password through: see its passwordBreached).
func (b *BreachRange) Breached(ctx context.Context, password string) (bool, error) {
	sum := sha1.Sum([]byte(password)) //nolint:gosec // the protocol's hash
	hash := strings.ToUpper(hex.EncodeToString(sum[:]))
	prefix, suffix := hash[:5], hash[5:]
	ctx, cancel := context.WithTimeout(ctx, breachRangeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+prefix, nil)
	if err != nil {
		return false, fmt.Errorf("breach range: %w", err)
	}
	// Padding hides from an observer of sizes which prefix was asked;
	// padded lines carry a count of 0 and are not breaches.
	req.Header.Set("Add-Padding", "true")
	resp, err := b.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("breach range: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("breach range: answered %d", resp.StatusCode)
	}
	body := &io.LimitedReader{R: resp.Body, N: maxBreachRangeBody + 1}
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		got, count, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		if strings.EqualFold(got, suffix) {
			return strings.TrimLeft(count, "0") != "", nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("breach range: %w", err)
	}
	if body.N == 0 {
		// Cut short, the answer may have held the suffix further on.
		return false, fmt.Errorf("breach range: answer over %d bytes", maxBreachRangeBody)
	}
	return false, nil
}

// BreachCheck is the one test of a new password against breaches, for
// every route that sets one (registration, set-password, an invite's
// initial password): the list shipped with Pinion, then, when Range is
// set (PINION_PASSWORD_BREACH_URL), the range API.
//
// A range service that fails or is slow lets the password through (and
// is logged): the shipped list, which has the passwords guessed first,
// was checked anyway, and a third party's outage must not stop people
// from registering or setting a password. An operator who wants the
// opposite can keep the service beside Pinion.
type BreachCheck struct {
	Range *BreachRange // nil: the shipped list only
	Log   *slog.Logger
}

// Breached reports whether password is a known breached one.
func (c BreachCheck) Breached(ctx context.Context, password string) bool {
	if Breached(password) {
		return true
	}
	if c.Range == nil {
		return false
	}
	found, err := c.Range.Breached(ctx, password)
	if err != nil {
		if c.Log != nil {
			c.Log.WarnContext(ctx, "password breach range not checked", "err", err)
		}
		return false
	}
	return found
}
