package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/embedded"
)

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	_, s := openWithJS(t, cfg)
	return s
}

// openWithJS opens a store on a NATS server of the test's own, and
// answers the JetStream context beside it.
func openWithJS(t *testing.T, cfg Config) (jetstream.JetStream, *Store) {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return js, s
}

// A login the bucket's TTL removed is forgotten by every view too, so a
// gateway holds only logins that can still have live tokens.
func TestLoginsExpire(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Config{LoginTTL: 2 * time.Second})
	if _, err := s.PutMembership(ctx, "m1", Membership{Project: "p", User: "User/u", Profile: "Patient/p", Active: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutLogin(ctx, "l1", Login{Membership: "m1", User: "User/u"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, _, _, err := v.Lookup(ctx, "l1"); err != nil {
		t.Fatalf("fresh login: %v", err)
	}
	eventually(t, "the view to forget the login its bucket dropped", func() bool {
		v.mu.RLock()
		defer v.mu.RUnlock()
		_, held := v.logins["l1"]
		return !held
	})
	if _, _, _, err := v.Lookup(ctx, "l1"); !errors.Is(err, ErrInactive) {
		t.Fatalf("expired login looked up: %v", err)
	}
	// Memberships have no TTL.
	if _, err := s.GetMembership(ctx, "m1"); err != nil {
		t.Fatalf("membership gone with the login: %v", err)
	}
}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after 10 s (testenv.WaitLimit; testenv is built on this
// package, so its tests cannot import it).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(pause)
	}
}

// The default lifetime outlives every token a login can have.
func TestLoginTTLOutlivesTokens(t *testing.T) {
	s := openStore(t, Config{})
	st, err := s.logins.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ttl := st.TTL(); ttl < RefreshLifetime+time.Hour || ttl < 25*time.Hour {
		t.Fatalf("logins bucket TTL %v is shorter than a token's life", ttl)
	}
}

func TestAddressRules(t *testing.T) {
	cases := []struct {
		value, ip string
		match     bool
	}{
		{"*", "198.51.100.1", true},
		{"198.51.100.1", "198.51.100.1", true},
		{"198.51.100.1", "198.51.100.10", false}, // Medplum's prefix match would say yes
		{"198.51.100.", "198.51.100.10", true},
		{"198.51.", "198.510.0.1", false},
		{"198.51.100.0/24", "198.51.100.200", true},
		{"198.51.100.0/24", "198.51.101.1", false},
		{"2001:db8::/32", "2001:db8:1::5", true},
		{"2001:db8:", "2001:db8::1", true},
		{"not an address/8", "10.0.0.1", false},
	}
	for _, tc := range cases {
		if got := MatchAddress(tc.value, tc.ip); got != tc.match {
			t.Errorf("%q covers %q: %v, want %v", tc.value, tc.ip, got, tc.match)
		}
	}
	m := Membership{Addresses: []AddressRule{{Value: "10.0.0.0/8"}, {Value: "10.1.", Block: true}, {Value: "*", Block: true}}}
	for ip, want := range map[string]bool{"10.1.2.3": true, "192.168.1.1": false, "": true} {
		if got := m.AllowsAddress(ip); got != want {
			t.Errorf("%q allowed: %v, want %v (the first matching rule decides)", ip, got, want)
		}
	}
	if !(&Membership{}).AllowsAddress("198.51.100.1") {
		t.Error("a membership without rules refuses an address")
	}
}

// Only a missing entry is ErrNotFound (and so the caller's problem, a 401
// or invalid_grant); a bucket that does not answer is another error, which
// callers return as a 5xx. Both were once the same answer.
func TestMissingIsNotFailing(t *testing.T) {
	ctx := context.Background()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := Open(ctx, js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLogin(ctx, "no-such-login"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing login: %v, want ErrNotFound", err)
	}
	if _, err := s.GetLogin(ctx, "not a key!"); !errors.Is(err, ErrNotFound) {
		t.Errorf("malformed login id: %v, want ErrNotFound", err)
	}
	if _, err := s.GetMembership(ctx, "no-such-membership"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing membership: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateLogin(ctx, "no-such-login", func(*Login) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a missing login: %v, want ErrNotFound", err)
	}
	if _, err := s.PutLogin(ctx, "l1", Login{Membership: "m1", User: "User/u"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	nc.Close() // the bucket stops answering
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.GetLogin(short, "l1"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("login with the bucket down: %v, want a failure that is not ErrNotFound", err)
	}
	if _, err := s.GetMembership(short, "m1"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("membership with the bucket down: %v, want a failure that is not ErrNotFound", err)
	}
	// The view holds l1 but not its membership: looking it up reaches the
	// bucket, whose failure must not read as an inactive session.
	if _, _, _, err := v.Lookup(short, "l1"); err == nil || errors.Is(err, ErrInactive) {
		t.Errorf("lookup with the bucket down: %v, want a failure that is not ErrInactive", err)
	}
}

// A view that saw a login only before its sign-in chose a membership reads
// the bucket for it: a token used the moment it was issued, while the
// watcher lagged, was refused ("no membership").
func TestLookupBehindTheSignIn(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, Config{LoginTTL: time.Hour})
	if _, err := s.PutMembership(ctx, "m1", Membership{Project: "p", User: "User/u", Profile: "Patient/p", Active: true}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	rev, err := s.PutLogin(ctx, "l1", Login{Membership: "m1", User: "User/u", Granted: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitApplied(ctx, LoginsBucket, rev); err != nil {
		t.Fatal(err)
	}
	// The copy the watcher held before the sign-in went on.
	v.mu.Lock()
	v.logins["l1"] = &Login{User: "User/u"}
	v.mu.Unlock()
	if _, mid, _, err := v.Lookup(ctx, "l1"); err != nil || mid != "m1" {
		t.Fatalf("a login the view holds from before its membership: %q, %v", mid, err)
	}
	// One with no membership in the bucket either does not count.
	if _, err := s.PutLogin(ctx, "l2", Login{User: "User/u"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := v.Lookup(ctx, "l2"); !errors.Is(err, ErrInactive) {
		t.Fatalf("a login without a membership: %v", err)
	}
}
