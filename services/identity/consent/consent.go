// Package consent keeps people's consents to client applications: before
// the first code for a client that is not first-party, the person is asked
// whether it may act for them, with the scopes it asked for (the page is
// signin's). The answer is kept per person and client, covers those
// scopes, and is withdrawn with DELETE /auth/consents/<client> or on the
// person's consents page; the sign-ins made under a consent end with it,
// their access and refresh tokens too.
package consent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/session"
)

// bucket keeps the consents, keyed by person and client (digests, so any
// client id makes a valid key), without expiry.
const bucket = "pinion_consents"

// Store keeps people's consents.
type Store struct {
	kv       jetstream.KeyValue
	sessions *session.Store // whose sign-ins end with a withdrawn consent
}

// Open opens the consents' bucket, making it on first use.
func Open(ctx context.Context, js jetstream.JetStream, sessions *session.Store) (*Store, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Description: "people's consents to clients"})
	if err != nil {
		return nil, fmt.Errorf("consents: %w", err)
	}
	return &Store{kv: kv, sessions: sessions}, nil
}

// Consent is one person's consent to one client.
type Consent struct {
	Client string `json:"client"`
	Scope  string `json:"scope"`
	At     int64  `json:"at"` // Unix seconds, when last given
}

func digestKey(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:16])
}

// consentKey is the bucket key of a person's consent to a client; the
// person's own digest first, so their consents list by prefix.
func consentKey(user, client string) string { return digestKey(user) + "." + digestKey(client) }

// Given reports whether the person consented to the client for every
// scope in scope ("": for anything at all).
func (s *Store) Given(ctx context.Context, user, client, scope string) (bool, error) {
	c, err := s.get(ctx, user, client)
	if c == nil || err != nil {
		return false, err
	}
	given := strings.Fields(c.Scope)
	for _, w := range strings.Fields(access.GrantedScope(scope)) {
		if !slices.Contains(given, w) {
			return false, nil
		}
	}
	return true, nil
}

func (s *Store) get(ctx context.Context, user, client string) (*Consent, error) {
	c, _, err := kvcas.Entry[Consent](ctx, s.kv, consentKey(user, client))
	return c, err
}

// maxConsentScopes bounds the scopes one consent keeps: the newest, when a
// client has asked for ever more over time.
const maxConsentScopes = 128

// Give records the person's consent to the client for the scopes of
// scope that are honoured (access.GrantedScope: words nobody honours need
// no consent), added to what they consented to before.
func (s *Store) Give(ctx context.Context, user, client, scope string) error {
	c, err := s.get(ctx, user, client)
	if err != nil {
		return err
	}
	words := strings.Fields(access.GrantedScope(scope))
	if c != nil {
		for _, w := range strings.Fields(c.Scope) {
			if len(words) < maxConsentScopes && !slices.Contains(words, w) {
				words = append(words, w)
			}
		}
	}
	b, _ := json.Marshal(Consent{Client: client, Scope: strings.Join(words, " "), At: time.Now().Unix()})
	_, err = s.kv.Put(ctx, consentKey(user, client), b)
	return err
}

// maxConsentsListed bounds an answer of List.
const maxConsentsListed = 1000

// List is GET /auth/consents: the clients the caller consented to
// (the first maxConsentsListed).
func (s *Store) List(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	user, err := consentUser(r)
	if err != nil {
		return nil, err
	}
	out, err := s.Of(ctx, user)
	if err != nil {
		return nil, err
	}
	return bus.JSON(200, map[string]any{"consents": out}), nil
}

// Of lists the clients user consented to (the first maxConsentsListed).
func (s *Store) Of(ctx context.Context, user string) ([]Consent, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, digestKey(user)+".*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = lister.Stop() }()
	out := []Consent{}
	for key := range lister.Keys() {
		c, _, err := kvcas.Entry[Consent](ctx, s.kv, key)
		if err != nil {
			return nil, err
		}
		if c != nil {
			out = append(out, *c)
		}
		if len(out) == maxConsentsListed {
			break
		}
	}
	return out, nil
}

// Withdraw is DELETE /auth/consents/:clientId.
func (s *Store) Withdraw(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	user, err := consentUser(r)
	if err != nil {
		return nil, err
	}
	rev, err := s.End(ctx, user, r.Param("clientId"))
	if err != nil {
		return nil, err
	}
	// Answered once this gateway's view has the end: the client's next
	// request with a token of the consent is refused.
	return bus.OK().WithSession(session.EndedBucket, rev), nil
}

// End withdraws user's consent to client: the client's next sign-in asks
// again, and every sign-in made under the consent ends, its access and
// refresh tokens with it. 404 when there is no such consent. rev is the
// sessions' ended bucket revision that ends them.
func (s *Store) End(ctx context.Context, user, client string) (rev uint64, err error) {
	key := consentKey(user, client)
	if _, err := s.kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fhir.NotFound()
	} else if err != nil {
		return 0, err
	}
	// The sign-ins end first: should the delete then fail, the consent is
	// still listed, and withdrawing it again finishes the work.
	if rev, err = s.sessions.EndConsentedSessions(ctx, user, client); err != nil {
		return 0, err
	}
	return rev, s.kv.Delete(ctx, key)
}

// consentUser is the person behind a request about their consents: only
// people consent, not clients.
func consentUser(r *bus.Request) (string, error) {
	p := r.Principal
	if p == nil {
		return "", fhir.Unauthorized()
	}
	if !strings.HasPrefix(p.User, "User/") {
		return "", fhir.BadRequest("Only a person's sign-in has consents")
	}
	return p.User, nil
}
