package consent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// A consent keeps only honoured scopes, at most maxConsentScopes of them:
// words nobody honours need no consent, and a client asking for ever more
// scopes does not grow the entry without end.
func TestConsentScopes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
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
