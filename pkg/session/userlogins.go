package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/kvcas"
)

// UserLoginsBucket keeps, per user, the ids of its recent sign-ins. The
// logins bucket is keyed by login id alone, and listing a person's
// sessions (/auth/me) must not scan every login of every user.
const UserLoginsBucket = "pinion_user_logins"

// MaxUserLogins bounds a user's list: a newer sign-in pushes out the
// oldest, which then no longer shows among the person's sessions (its
// tokens still work until they expire or it is revoked by its token).
const MaxUserLogins = 32

// Bounds of what a login records about where it came from.
const (
	MaxUserAgent     = 512
	MaxRemoteAddress = 64 // an IPv6 address with a zone fits
	maxAuthMethod    = 32
)

// SetOrigin records how and from where a login was made, each cut to its
// bound: the values come from the client.
func (l *Login) SetOrigin(method, remote, userAgent string) {
	l.AuthMethod = cut(method, maxAuthMethod)
	l.RemoteAddress = cut(remote, MaxRemoteAddress)
	l.UserAgent = cut(userAgent, MaxUserAgent)
}

// cut shortens s to at most n bytes of valid UTF-8.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// recentLogin is one entry of a user's list.
type recentLogin struct {
	ID    string `json:"i"`
	Start int64  `json:"t"` // Unix milliseconds
}

// UserLogins is the per-user list of recent sign-ins. Only the identity
// service, which makes sign-ins, opens it.
type UserLogins struct {
	kv    jetstream.KeyValue
	store *Store
	ttl   time.Duration
}

// UserLogins is the store's per-user list of sign-ins, its bucket created
// on first use: only the identity service, which makes sign-ins, uses it,
// so no other process (the gateway may not create it) opens it.
func (s *Store) UserLogins(ctx context.Context) (*UserLogins, error) {
	s.userMu.Lock()
	defer s.userMu.Unlock()
	if s.userLogin == nil {
		u, err := openUserLogins(ctx, s.js, s, s.cfg)
		if err != nil {
			return nil, err
		}
		s.userLogin = u
	}
	return s.userLogin, nil
}

// openUserLogins creates the bucket if needed. An entry lives as long as a
// login after the user's last sign-in: by then every login it names is gone.
func openUserLogins(ctx context.Context, js jetstream.JetStream, s *Store, cfg Config) (*UserLogins, error) {
	ttl := cfg.LoginTTL
	if ttl == 0 {
		ttl = LoginTTL
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         UserLoginsBucket,
		Description:    "each user's recent sign-ins",
		History:        1,
		Storage:        jetstream.FileStorage,
		TTL:            ttl,
		LimitMarkerTTL: min(markerTTL, ttl),
	})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", UserLoginsBucket, err)
	}
	return &UserLogins{kv: kv, store: s, ttl: ttl}, nil
}

// Add puts a new login at the end of its user's list, dropping entries
// older than a login lives and the oldest beyond MaxUserLogins. It is one
// read and one compare-and-set write, retried if another sign-in of the
// same user wrote in between.
func (u *UserLogins) Add(ctx context.Context, user, loginID string, start time.Time) error {
	for range 10 {
		var list []recentLogin
		var rev uint64
		e, err := u.kv.Get(ctx, user)
		switch {
		case err == nil:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &list) != nil {
				list = nil // unreadable: start again rather than refuse the sign-in
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return fmt.Errorf("user logins: %w", err)
		}
		oldest := start.Add(-u.ttl).UnixMilli()
		list = slices.DeleteFunc(list, func(r recentLogin) bool { return r.Start < oldest || r.ID == loginID })
		list = append(list, recentLogin{ID: loginID, Start: start.UnixMilli()})
		if len(list) > MaxUserLogins {
			list = list[len(list)-MaxUserLogins:]
		}
		b, _ := json.Marshal(list)
		if rev == 0 {
			_, err = u.kv.Create(ctx, user, b)
		} else {
			_, err = u.kv.Update(ctx, user, b, rev)
		}
		if err == nil {
			return nil
		}
		if !kvcas.Conflict(err) {
			return fmt.Errorf("user logins: %w", err)
		}
	}
	return errors.New("user logins: too many concurrent sign-ins")
}

// LiveLogin is one of a user's live sign-ins.
type LiveLogin struct {
	ID      string
	Updated time.Time // the login's last write: its sign-in, code or refresh
	Login   Login
}

// Live lists a user's sign-ins written since the given time that still
// count: chosen a membership, not revoked, not ended by a password change.
// Newest first.
func (u *UserLogins) Live(ctx context.Context, user string, since time.Time) ([]LiveLogin, error) {
	e, err := u.kv.Get(ctx, user)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("user logins: %w", err)
	}
	var list []recentLogin
	if err := json.Unmarshal(e.Value(), &list); err != nil {
		return nil, nil
	}
	ended, err := u.store.SessionsEnded(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []LiveLogin
	for _, r := range list {
		le, err := u.store.logins.Get(ctx, r.ID)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			continue // expired
		}
		if err != nil {
			return nil, fmt.Errorf("login %s: %w", r.ID, err)
		}
		var l Login
		if json.Unmarshal(le.Value(), &l) != nil || l.User != user || l.Membership == "" || l.Revoked || l.Dead(ended) ||
			le.Created().Before(since) {
			continue
		}
		out = append(out, LiveLogin{ID: r.ID, Updated: le.Created(), Login: l})
	}
	slices.SortStableFunc(out, func(a, b LiveLogin) int { return b.Updated.Compare(a.Updated) })
	return out, nil
}
