package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

func newUserLogins(t *testing.T) (*Store, *UserLogins) {
	t.Helper()
	js, s := openWithJS(t, Config{})
	// Opening the sessions does not create it: the gateway may not.
	if _, err := js.KeyValue(context.Background(), UserLoginsBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("the bucket before first use: %v", err)
	}
	u, err := s.UserLogins(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, u
}

// signIn writes a login and adds it to its user's list, as identity does.
func signIn(t *testing.T, s *Store, u *UserLogins, id string, l Login) {
	t.Helper()
	ctx := context.Background()
	l.Start = time.Now().UnixMilli()
	if _, err := s.PutLogin(ctx, id, l); err != nil {
		t.Fatal(err)
	}
	if err := u.Add(ctx, l.User, id, time.UnixMilli(l.Start)); err != nil {
		t.Fatal(err)
	}
}

func liveIDs(t *testing.T, u *UserLogins, user string, since time.Time) []string {
	t.Helper()
	live, err := u.Live(context.Background(), user, since)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range live {
		ids = append(ids, l.ID)
	}
	return ids
}

// A user's live sign-ins are listed, newest first, with where they came
// from; revoked ones, ones still choosing a membership, another user's,
// ones ended by a password change and ones not written since are not.
func TestUserLoginsLive(t *testing.T) {
	ctx := context.Background()
	s, u := newUserLogins(t)
	signIn(t, s, u, "old", Login{User: "User/a", Membership: "m"})
	since := time.Now()
	var l Login
	l.SetOrigin("password", "192.0.2.1", "Mozilla/5.0 test")
	l.User, l.Membership = "User/a", "m"
	signIn(t, s, u, "first", l)
	signIn(t, s, u, "second", Login{User: "User/a", Membership: "m", AuthMethod: "password"})
	signIn(t, s, u, "choosing", Login{User: "User/a"})
	signIn(t, s, u, "revoked", Login{User: "User/a", Membership: "m", Revoked: true})
	signIn(t, s, u, "other", Login{User: "User/b", Membership: "m2"})

	if got, want := liveIDs(t, u, "User/a", since), []string{"second", "first"}; !slices.Equal(got, want) {
		t.Fatalf("live %v, want %v", got, want)
	}
	if got := liveIDs(t, u, "User/a", time.Time{}); !slices.Equal(got, []string{"second", "first", "old"}) {
		t.Fatalf("since ever: %v", got)
	}
	live, _ := u.Live(ctx, "User/a", since)
	if got := live[1]; got.Login.RemoteAddress != "192.0.2.1" || got.Login.UserAgent != "Mozilla/5.0 test" ||
		got.Login.AuthMethod != "password" || got.Updated.Before(since) {
		t.Fatalf("first %+v", got)
	}
	// A refresh writes the login again: it counts as updated then.
	if _, err := s.UpdateLogin(ctx, "old", func(l *Login) error { l.RefreshDigest = "x"; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := liveIDs(t, u, "User/a", since); !slices.Equal(got, []string{"old", "second", "first"}) {
		t.Fatalf("after a refresh: %v", got)
	}
	if got := liveIDs(t, u, "User/b", since); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("the other user's: %v", got)
	}
	if got := liveIDs(t, u, "User/nobody", since); len(got) != 0 {
		t.Fatalf("nobody's: %v", got)
	}
	if _, err := s.EndSessions(ctx, "User/a"); err != nil {
		t.Fatal(err)
	}
	if got := liveIDs(t, u, "User/a", time.Time{}); len(got) != 0 {
		t.Fatalf("after the sessions were ended: %v", got)
	}
	signIn(t, s, u, "after", Login{User: "User/a", Membership: "m"})
	if got := liveIDs(t, u, "User/a", time.Time{}); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("a sign-in after the end: %v", got)
	}
}

// A user's list keeps only the newest MaxUserLogins sign-ins.
func TestUserLoginsBounded(t *testing.T) {
	ctx := context.Background()
	s, u := newUserLogins(t)
	for i := range MaxUserLogins + 5 {
		signIn(t, s, u, fmt.Sprintf("l%02d", i), Login{User: "User/a", Membership: "m"})
	}
	e, err := u.kv.Get(ctx, "User/a")
	if err != nil {
		t.Fatal(err)
	}
	var list []recentLogin
	if err := json.Unmarshal(e.Value(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != MaxUserLogins || list[0].ID != "l05" || list[len(list)-1].ID != fmt.Sprintf("l%02d", MaxUserLogins+4) {
		t.Fatalf("%d entries, %v … %v", len(list), list[0], list[len(list)-1])
	}
	if got := liveIDs(t, u, "User/a", time.Time{}); len(got) != MaxUserLogins {
		t.Fatalf("%d live", len(got))
	}
}

// What a client sends about itself is cut to bounds, as valid UTF-8.
func TestSetOriginBounds(t *testing.T) {
	var l Login
	l.SetOrigin(strings.Repeat("m", 100), strings.Repeat("1", 100), strings.Repeat("é", MaxUserAgent)+"\xff")
	if len(l.AuthMethod) > maxAuthMethod || len(l.RemoteAddress) != MaxRemoteAddress || len(l.UserAgent) > MaxUserAgent ||
		len(l.UserAgent) < MaxUserAgent-1 || !utf8.ValidString(l.UserAgent) {
		t.Fatalf("%d %d %d %v", len(l.AuthMethod), len(l.RemoteAddress), len(l.UserAgent), utf8.ValidString(l.UserAgent))
	}
	l.SetOrigin("password", "::1", "curl/8")
	if l.AuthMethod != "password" || l.RemoteAddress != "::1" || l.UserAgent != "curl/8" {
		t.Fatalf("%+v", l)
	}
}
