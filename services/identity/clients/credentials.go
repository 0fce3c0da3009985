package clients

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/clientsecret"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// Cred is the stored digest of a client's secret, and after a
// rotation the old one's, good until RetiringUntil (Medplum's retiringSecret).
type Cred struct {
	ID            string    `json:"id"`
	Digest        string    `json:"digest"`
	Retiring      string    `json:"retiring,omitempty"`
	RetiringUntil time.Time `json:"retiringUntil,omitzero"`
	// Record holds the current secret, sealed: only pkg/clientsecret opens it.
	clientsecret.Record
	raw []byte // as stored: the condition of a swap
}

// Matches checks a presented secret against the current and retiring digests.
func (c *Cred) Matches(secret string) bool {
	return auth.SecretMatches(c.Digest, secret) || c.RetiringMatches(secret)
}

// RetiringMatches checks a secret against the retiring digest, while it lasts.
func (c *Cred) RetiringMatches(secret string) bool {
	return c.Retiring != "" && time.Now().Before(c.RetiringUntil) && auth.SecretMatches(c.Retiring, secret)
}

func credID(clientID string) string { return clientsecret.Key(clientID) }

func (s *Service) SetSecret(ctx context.Context, clientID, secret string) error {
	c, err := s.newClientCred(ctx, clientID, secret)
	if err != nil {
		return err
	}
	return s.putClientCred(ctx, c, nil)
}

// newClientCred is the credentials of a client whose secret is secret: its
// digest, to sign in with, and the secret sealed, for its project's admins
// to read again (pkg/clientsecret).
func (s *Service) newClientCred(ctx context.Context, clientID, secret string) (Cred, error) {
	sealed, err := clientsecret.For(s.repo).Seal(ctx, clientID, secret)
	if err != nil {
		return Cred{}, err
	}
	return Cred{ID: credID(clientID), Digest: auth.SecretDigest(secret), Record: clientsecret.Record{Shown: sealed}}, nil
}

// putClientCred stores a client's credentials and tells every identity
// instance to forget what it cached of the client, so a retired secret
// stops working everywhere at once. With prev set, it replaces only those
// credentials: of two rotations at once, one wins and the other is a 409,
// rather than both answering a secret of which one never works.
func (s *Service) putClientCred(ctx context.Context, c Cred, prev *Cred) error {
	var err error
	if prev == nil {
		err = s.secrets.Save(ctx, c.ID, c)
	} else {
		err = s.secrets.Swap(ctx, c.ID, prev.raw, c)
	}
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return fhir.Conflict("The client's secret changed meanwhile; try again")
	}
	if err != nil {
		return fmt.Errorf("store client secret: %w", err)
	}
	s.Announce(strings.TrimPrefix(c.ID, "ClientApplication/"))
	return nil
}

// DropSecret removes the credentials of a client that was not created.
func (s *Service) DropSecret(ctx context.Context, clientID string) {
	if err := s.repo.SetSecret(ctx, credID(clientID), nil); err != nil {
		s.log.Warn("credentials of an uncreated client left behind", "client", clientID, "err", err)
	}
}

func (s *Service) Credentials(ctx context.Context, clientID string) (*Cred, error) {
	var c Cred
	raw, found, err := s.secrets.Load(ctx, credID(clientID), &c)
	if err != nil || !found {
		return nil, err
	}
	c.raw = raw
	return &c, nil
}

// Rotate gives a client a new secret in place of cur (nil
// for none); cur's secret retires for the grace period. A secret retiring
// from an earlier rotation stops now: a client has at most two working
// secrets.
func (s *Service) Rotate(ctx context.Context, clientID string, cur *Cred) (string, error) {
	secret := auth.NewSecret()
	c, err := s.newClientCred(ctx, clientID, secret)
	if err != nil {
		return "", err
	}
	if cur != nil {
		c.Retiring, c.RetiringUntil = cur.Digest, time.Now().Add(s.cfg.SecretGrace).UTC()
	}
	if err := s.putClientCred(ctx, c, cur); err != nil {
		return "", err
	}
	return secret, nil
}

// retire ends cur's retiring secret before its grace period does.
func (s *Service) retire(ctx context.Context, cur *Cred) error {
	return s.putClientCred(ctx, Cred{ID: cur.ID, Digest: cur.Digest, Record: cur.Record}, cur)
}

// lock serialises credential changes of one client in this process,
// each reading the credentials and swapping them: two at once land one
// after the other. Across processes the store's conditional swap decides,
// and the loser answers 409.
func (s *Service) lock(clientID string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(clientID))
	mu := &s.locks[h.Sum32()%uint32(len(s.locks))]
	mu.Lock()
	return mu.Unlock
}
