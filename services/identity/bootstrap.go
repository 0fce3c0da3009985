package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/clientsecret"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/services/identity/account"
)

// Bootstrap is the super-admin client, and whether this start created its
// secret (then Secret is set, to be shown once).
type Bootstrap struct {
	ClientID  string `json:"clientId"`
	Secret    string `json:"clientSecret,omitempty"`
	ProjectID string `json:"projectId"`
	Created   bool   `json:"-"`
}

// Fixed ids make the bootstrap idempotent across restarts and instances.
var (
	SuperAdminProjectID = uuid.NewSHA1(account.IDNamespace, []byte("project:superadmin")).String()
)

func membershipIDFor(user string) string {
	return uuid.NewSHA1(account.IDNamespace, []byte("superadmin-membership:"+user)).String()
}

const superAdminFile = "superadmin.json"

func (s *Service) bootstrap(ctx context.Context) (Bootstrap, error) {
	b := Bootstrap{ProjectID: SuperAdminProjectID}
	if err := s.ensure(ctx, "Project", SuperAdminProjectID, map[string]any{
		"resourceType": "Project", "name": "Super Admin", "superAdmin": true, "strictMode": true,
	}, SuperAdminProjectID); err != nil {
		return b, err
	}

	b.ClientID, b.Secret = s.cfg.SuperAdminClientID, s.cfg.SuperAdminSecret
	path := ""
	if s.cfg.DataDir != "" {
		path = filepath.Join(s.cfg.DataDir, superAdminFile)
	}
	if b.ClientID == "" && path != "" {
		if data, err := os.ReadFile(path); err == nil {
			var saved Bootstrap
			if json.Unmarshal(data, &saved) == nil && saved.ClientID != "" {
				b.ClientID = saved.ClientID
			}
		}
	}
	generated := false
	if b.ClientID == "" {
		b.ClientID = uuid.NewString()
		b.Secret = auth.NewSecret()
		generated = true
	}
	if err := s.ensure(ctx, "ClientApplication", b.ClientID, map[string]any{
		"resourceType": "ClientApplication", "name": "Super Admin Client",
		"description": "Created at first start; its membership is in the super-admin project.",
	}, SuperAdminProjectID); err != nil {
		return b, err
	}
	if b.Secret != "" {
		// A configured secret always wins: changing the variable rotates it.
		if err := s.setClientSecret(ctx, b.ClientID, b.Secret); err != nil {
			return b, err
		}
	}
	ref := "ClientApplication/" + b.ClientID
	mid := membershipIDFor(ref)
	pm, err := resource.Map(superAdminMembership(ref))
	if err != nil {
		return b, err
	}
	if err := s.ensure(ctx, "ProjectMembership", mid, pm, SuperAdminProjectID); err != nil {
		return b, err
	}
	if _, err := projects.Project(ctx, s.nc, "ProjectMembership", mid, SuperAdminProjectID); err != nil {
		return b, fmt.Errorf("session membership: %w", err)
	}
	if generated {
		b.Created = true
		if path != "" {
			data, _ := json.MarshalIndent(b, "", "  ")
			if err := os.WriteFile(path, append(data, '\n'), 0o600); err != nil {
				return b, fmt.Errorf("write %s: %w", path, err)
			}
		}
	}
	return b, nil
}

// superAdminMembership is the super-admin client's membership, an admin
// of the super-admin project.
func superAdminMembership(ref string) *resource.ProjectMembership {
	return &resource.ProjectMembership{
		ResourceType: "ProjectMembership",
		Project:      resource.Reference{Reference: "Project/" + SuperAdminProjectID, Display: "Super Admin"},
		User:         resource.Reference{Reference: ref, Display: "Super Admin Client"},
		Profile:      resource.Reference{Reference: ref, Display: "Super Admin Client"},
		Admin:        new(true),
	}
}

// ensure creates a resource with a fixed id unless it already exists.
func (s *Service) ensure(ctx context.Context, typ, id string, res map[string]any, project string) error {
	_, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fhir.ErrNotFound) {
		return err
	}
	_, err = s.repo.Create(ctx, repo.AllProjects, res, repo.WriteOptions{ID: id, Project: project})
	if errors.Is(err, fhir.ErrConflict) {
		return nil // another instance created it first
	}
	return err
}

// clientCred is the stored digest of a client's secret, and after a
// rotation the old one's, good until RetiringUntil (Medplum's retiringSecret).
type clientCred struct {
	ID            string    `json:"id"`
	Digest        string    `json:"digest"`
	Retiring      string    `json:"retiring,omitempty"`
	RetiringUntil time.Time `json:"retiringUntil,omitzero"`
	// Record holds the current secret, sealed: only pkg/clientsecret opens it.
	clientsecret.Record
	raw []byte // as stored: the condition of a swap
}

// matches checks a presented secret against the current and retiring digests.
func (c *clientCred) matches(secret string) bool {
	return auth.SecretMatches(c.Digest, secret) || c.retiringMatches(secret)
}

// retiringMatches checks a secret against the retiring digest, while it lasts.
func (c *clientCred) retiringMatches(secret string) bool {
	return c.Retiring != "" && time.Now().Before(c.RetiringUntil) && auth.SecretMatches(c.Retiring, secret)
}

func credID(clientID string) string { return clientsecret.Key(clientID) }

func (s *Service) setClientSecret(ctx context.Context, clientID, secret string) error {
	c, err := s.newClientCred(ctx, clientID, secret)
	if err != nil {
		return err
	}
	return s.putClientCred(ctx, c, nil)
}

// newClientCred is the credentials of a client whose secret is secret: its
// digest, to sign in with, and the secret sealed, for its project's admins
// to read again (pkg/clientsecret).
func (s *Service) newClientCred(ctx context.Context, clientID, secret string) (clientCred, error) {
	sealed, err := clientsecret.For(s.repo).Seal(ctx, clientID, secret)
	if err != nil {
		return clientCred{}, err
	}
	return clientCred{ID: credID(clientID), Digest: auth.SecretDigest(secret), Record: clientsecret.Record{Shown: sealed}}, nil
}

// putClientCred stores a client's credentials and tells every identity
// instance to forget what it cached of the client, so a retired secret
// stops working everywhere at once. With prev set, it replaces only those
// credentials: of two rotations at once, one wins and the other is a 409,
// rather than both answering a secret of which one never works.
func (s *Service) putClientCred(ctx context.Context, c clientCred, prev *clientCred) error {
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
	s.announceClient(strings.TrimPrefix(c.ID, "ClientApplication/"))
	return nil
}

// dropClientSecret removes the credentials of a client that was not created.
func (s *Service) dropClientSecret(ctx context.Context, clientID string) {
	if err := s.repo.SetSecret(ctx, credID(clientID), nil); err != nil {
		s.log.Warn("credentials of an uncreated client left behind", "client", clientID, "err", err)
	}
}

func (s *Service) clientCred(ctx context.Context, clientID string) (*clientCred, error) {
	var c clientCred
	raw, found, err := s.secrets.Load(ctx, credID(clientID), &c)
	if err != nil || !found {
		return nil, err
	}
	c.raw = raw
	return &c, nil
}

// rotateClientSecret gives a client a new secret in place of cur (nil
// for none); cur's secret retires for the grace period. A secret retiring
// from an earlier rotation stops now: a client has at most two working
// secrets.
func (s *Service) rotateClientSecret(ctx context.Context, clientID string, cur *clientCred) (string, error) {
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

// retireClientSecret ends cur's retiring secret before its grace period does.
func (s *Service) retireClientSecret(ctx context.Context, cur *clientCred) error {
	return s.putClientCred(ctx, clientCred{ID: cur.ID, Digest: cur.Digest, Record: cur.Record}, cur)
}

// lockClient serialises credential changes of one client in this process,
// each reading the credentials and swapping them: two at once land one
// after the other. Across processes the store's conditional swap decides,
// and the loser answers 409.
func (s *Service) lockClient(clientID string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(clientID))
	mu := &s.credLocks[h.Sum32()%uint32(len(s.credLocks))]
	mu.Lock()
	return mu.Unlock
}
