package consent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"

	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// open is a consent store over a real JetStream, and the sessions it ends.
func open(t *testing.T) (*Store, *session.Store) {
	t.Helper()
	ctx := context.Background()
	js := testenv.JetStream(t)
	sessions, err := session.Open(ctx, js, session.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, sessions)
	if err != nil {
		t.Fatal(err)
	}
	return s, sessions
}

// Withdrawing a consent ends the sign-ins made under it, and only those:
// the gateway's view of sessions refuses their logins (and so every access
// token they issued), while the same person's sign-ins through another
// client, or through the same client without a consent (first-party),
// go on.
func TestEndEndsTheSignInsMadeUnderTheConsent(t *testing.T) {
	ctx := context.Background()
	s, sessions := open(t)
	user, client, other := "User/"+uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, c := range []string{client, other} {
		if err := s.Give(ctx, user, c, "openid"); err != nil {
			t.Fatal(err)
		}
	}
	m := session.Membership{Project: "p", User: user, Profile: "Practitioner/x", Active: true}
	if _, err := sessions.PutMembership(ctx, "m1", m); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute).UnixMilli()
	logins := map[string]session.Login{
		"under-consent":   {User: user, Client: client, Membership: "m1", Consented: true, Start: start, CodeAt: start},
		"other-client":    {User: user, Client: other, Membership: "m1", Consented: true, Start: start, CodeAt: start},
		"without-consent": {User: user, Client: client, Membership: "m1", Start: start, CodeAt: start},
	}
	for id, l := range logins {
		if _, err := sessions.PutLogin(ctx, id, l); err != nil {
			t.Fatal(err)
		}
	}
	view, err := sessions.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range logins {
		if _, _, _, err := view.Lookup(ctx, id); err != nil {
			t.Fatalf("%s before the withdrawal: %v", id, err)
		}
	}
	if _, err := s.End(ctx, user, client); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the view refuses the sign-in made under the consent", func() bool {
		_, _, _, err := view.Lookup(ctx, "under-consent")
		return errors.Is(err, session.ErrInactive)
	})
	for _, id := range []string{"other-client", "without-consent"} {
		if _, _, _, err := view.Lookup(ctx, id); err != nil {
			t.Errorf("%s after the withdrawal: %v", id, err)
		}
	}
	if ok, _ := s.Given(ctx, user, client, ""); ok {
		t.Error("the consent is still given")
	}
	if _, err := s.End(ctx, user, client); !errors.Is(err, fhir.ErrNotFound) {
		t.Errorf("withdrawing again: %v, want not found", err)
	}
}

// A consent keeps only honoured scopes, at most maxConsentScopes of them:
// words nobody honours need no consent, and a client asking for ever more
// scopes does not grow the entry without end.
func TestConsentScopes(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	user, client := "User/"+uuid.NewString(), uuid.NewString()
	if err := s.Give(ctx, user, client, "openid launch/patient no-such-scope"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Given(ctx, user, client, "openid launch/patient"); err != nil || !ok {
		t.Fatalf("an unhonoured word asked again: %v %v", ok, err)
	}
	if ok, _ := s.Given(ctx, user, client, "openid email"); ok {
		t.Fatal("a scope never allowed counts as allowed")
	}
	for round := range 4 {
		var many []string
		for i := range 64 {
			many = append(many, fmt.Sprintf("patient/Observation.rs?_id=r%d-%d", round, i))
		}
		if err := s.Give(ctx, user, client, strings.Join(many, " ")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.get(ctx, user, client)
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if n := len(strings.Fields(c.Scope)); n != maxConsentScopes {
		t.Fatalf("%d scopes kept, want %d", n, maxConsentScopes)
	}
	if ok, _ := s.Given(ctx, user, client, "patient/Observation.rs?_id=r3-0"); !ok {
		t.Fatal("the newest scopes were not kept")
	}
}
