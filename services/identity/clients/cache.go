package clients

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
)

// clientTTL bounds how long a cached client is trusted without events;
// maxClients bounds how many are cached (clients, not callers: only
// existing clients are cached).
const (
	clientTTL  = time.Minute
	maxClients = 10_000
)

// Client caches what issuing a client token needs, so that issuance
// costs no database query once a client is warm.
type Client struct {
	Cred       *Cred // nil: the client has no secret
	JWKS       bool  // it has a jwksUri: it authenticates with assertions
	Membership string
	LoginID    string // the one login all its tokens share
	// Displays are the names the membership keeps for its project and
	// profile, read when the client was loaded: a changed membership
	// empties the cache (onResourceEvent), so they are never older than
	// the entry itself, and a token answer needs no read for them.
	Displays Displays
}

// Why Authenticate refuses a client.
var (
	ErrUnknown  = errors.New("Invalid client")                   // no such client, none with a secret, or without a membership
	ErrSecret   = errors.New("Invalid secret")                   // the proof failed
	ErrInactive = errors.New("Profile not active")               // its membership is inactive
	ErrAddress  = errors.New(fhir.AddressNotAllowed().Message()) // its policy blocks the address
)

// Authenticate makes the checks every client authentication shares,
// the token endpoint's client_credentials grant and HTTP Basic on the API:
// the client exists and has a membership, the secret is its current or
// retiring one, and the membership is active and allows the address.
//
// proof is how the client proved who it is: its secret (SecretProof), or
// an assertion already verified. applied is the memberships revision the
// forwarding gateway had applied (0: none named), which the membership
// entry must be at least as fresh as.
//
// A refusal is one of the Err values above; any other error is the
// service failing.
func (s *Service) Authenticate(ctx context.Context, id, remote string, applied uint64, proof func(*Client) bool) (*Client, *session.Membership, error) {
	c, err := s.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if c == nil || c.Cred == nil || c.Membership == "" {
		return nil, nil, ErrUnknown
	}
	if !proof(c) {
		return nil, nil, ErrSecret
	}
	// The cache learns of a removed membership from events, which may come
	// after the removal was answered; the session bucket is written before
	// that answer, so its entry, as fresh as the gateway's view
	// (clientMemberships), is what the client may do now.
	member, err := s.clientMembership(ctx, c.Membership, applied)
	if errors.Is(err, session.ErrNotFound) {
		s.Forget(id)
		return nil, nil, ErrUnknown
	}
	if err != nil {
		return nil, nil, fmt.Errorf("session membership: %w", err)
	}
	if !member.Active {
		// Medplum issues the token and refuses its every use; refusing it
		// here says why.
		return nil, nil, ErrInactive
	}
	if !member.AllowsAddress(remote) {
		return nil, nil, ErrAddress
	}
	return c, member, nil
}

// clientMembership is a client's membership entry, from the watched copy
// when the service keeps one.
func (s *Service) clientMembership(ctx context.Context, id string, applied uint64) (*session.Membership, error) {
	if s.members == nil {
		return s.sessions.GetMembership(ctx, id)
	}
	return s.members.Get(ctx, id, applied)
}

// SecretProof checks a presented secret against the client's current and
// retiring ones.
func (s *Service) SecretProof(ctx context.Context, id, secret string) func(*Client) bool {
	return func(c *Client) bool { return c.Cred.Matches(secret) || s.matchesFresh(ctx, id, secret) }
}

// matchesFresh checks a secret the cached client refused against the stored
// credentials: a secret just rotated in works at once even on an instance
// that has not yet heard of the rotation.
func (s *Service) matchesFresh(ctx context.Context, id, secret string) bool {
	cred, err := s.Credentials(ctx, id)
	if err != nil || cred == nil || !cred.Matches(secret) {
		return false
	}
	s.Forget(id)
	return true
}

// client returns the cached client, loading it on a miss. nil means no such
// client (or one without a membership).
func (s *Service) Get(ctx context.Context, id string) (*Client, error) {
	if c, ok := s.cache.Get(id); ok {
		return c, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", id)
	if fhir.Missing(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var app struct {
		JWKSURI string `json:"jwksUri"`
	}
	if err := json.Unmarshal(res.JSON, &app); err != nil {
		return nil, err
	}
	cred, err := s.Credentials(ctx, id)
	if err != nil {
		return nil, err
	}
	c := &Client{Cred: cred, JWKS: app.JWKSURI != ""}
	ref := "ClientApplication/" + id
	q, err := search.Parse("ProjectMembership", url.Values{"user": {ref}, "_count": {"2"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	if len(page.Resources) > 0 {
		pm := page.Resources[0]
		c.Membership = pm.ID
		// One login per client: client tokens are cheap to issue and all of
		// them stop together when the client or its membership goes.
		c.LoginID = uuid.NewSHA1(account.IDNamespace, []byte("client-login:"+id+":"+pm.ID)).String()
		c.Displays = DisplaysOf(pm.JSON)
		if _, err := s.sessions.PutLogin(ctx, c.LoginID, session.Login{Membership: pm.ID, User: ref, Client: id, AuthMethod: AuthClient}); err != nil {
			return nil, fmt.Errorf("session login: %w", err)
		}
	}
	s.cache.Add(id, c)
	return c, nil
}

// Announce forgets a client here and in every other identity
// instance, after its credentials changed.
func (s *Service) Announce(id string) {
	s.Forget(id)
	if err := s.nc.Publish(bus.ClientChangedSubject, []byte(id)); err != nil {
		s.log.Warn("client change not announced; other instances trust their cache up to a minute", "client", id, "err", err)
	}
}

func (s *Service) Forget(id string) { s.cache.Remove(id) }

// Cached is the client as cached, without loading it: whether this
// instance still trusts what it read.
func (s *Service) Cached(id string) (*Client, bool) { return s.cache.Get(id) }

// onResourceEvent drops cached clients when clients or memberships change.
func (s *Service) onResourceEvent(m *nats.Msg) {
	var ev repo.Event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "ClientApplication":
		s.Forget(ev.ID)
	case "ProjectMembership", "AccessPolicy":
		s.cache.Purge()
	}
}

// Displays are a membership's project and profile references with
// the display names it keeps for them.
type Displays struct {
	Project fhir.Reference `json:"project"`
	Profile fhir.Reference `json:"profile"`
}

// DisplaysOf reads a stored ProjectMembership's references; a membership
// that does not decode has none, and its answers carry bare references.
func DisplaysOf(membershipJSON []byte) Displays {
	var d Displays
	if json.Unmarshal(membershipJSON, &d) != nil {
		return Displays{}
	}
	return d
}

// Refs are the project and profile of a token answer: the bare
// references, named with the membership's display names where it names
// the same resources.
func (d Displays) Refs(projectID, profileRef string) (project, profile fhir.Reference) {
	project, profile = fhir.Reference{Reference: "Project/" + projectID}, fhir.Reference{Reference: profileRef}
	if d.Project.Reference == project.Reference {
		project.Display = d.Project.Display
	}
	if d.Profile.Reference == profile.Reference {
		profile.Display = d.Profile.Display
	}
	return project, profile
}

// MemberRefs are the project and profile of a token answer, with the
// display names the membership keeps (Medplum's client shows them: the
// command line tool's whoami prints them). Without the membership at hand,
// the bare references still answer.
func (s *Service) MemberRefs(ctx context.Context, membership, projectID, profileRef string) (project, profile fhir.Reference) {
	res, err := s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", membership)
	if err != nil {
		s.log.Warn("token answer without display names", "membership", membership, "err", err)
		return Displays{}.Refs(projectID, profileRef)
	}
	return DisplaysOf(res.JSON).Refs(projectID, profileRef)
}
