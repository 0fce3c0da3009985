package identity

import (
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
)

func TestPasswordRequestUsable(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const id, secret = "r1", "link-secret"
	fresh := passwordRequest{ID: id, User: "u1", Type: "reset", Digest: auth.SecretDigest(secret), Expires: now.Add(time.Hour)}
	cases := []struct {
		name           string
		edit           func(*passwordRequest)
		latest, secret string
		at             time.Time
		text           string
	}{
		{name: "fresh", latest: id, secret: secret, at: now},
		{name: "at its expiry", latest: id, secret: secret, at: now.Add(time.Hour)},
		{name: "used", edit: func(pr *passwordRequest) { pr.Used = true }, latest: id, secret: secret, at: now, text: "Already used"},
		{name: "a newer one was sent", latest: "r2", secret: secret, at: now, text: "Already used"},
		{name: "no newest recorded", latest: "", secret: secret, at: now, text: "Already used"},
		{name: "expired", latest: id, secret: secret, at: now.Add(time.Hour + time.Nanosecond), text: "Request expired"},
		{name: "wrong secret", latest: id, secret: "guess", at: now, text: "Incorrect secret"},
		{name: "no secret", latest: id, secret: "", at: now, text: "Incorrect secret"},
		{name: "used and expired: used", edit: func(pr *passwordRequest) { pr.Used = true }, latest: id, secret: secret,
			at: now.Add(2 * time.Hour), text: "Already used"},
		{name: "expired and wrong: expired", latest: id, secret: "guess", at: now.Add(2 * time.Hour), text: "Request expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr := fresh
			if tc.edit != nil {
				tc.edit(&pr)
			}
			err := pr.usable(id, tc.latest, tc.secret, tc.at)
			if tc.text == "" {
				expectOutcome(t, err, 0, "", "")
				return
			}
			expectOutcome(t, err, 400, tc.text, "")
		})
	}
}
