// Package clients keeps client applications as the identity service
// needs them: their secrets (digests, rotation with a grace period, the
// sealed copy admins read again), a cache of what issuing a client token
// needs, dropped when a client, membership or policy changes (on every
// identity instance, through events and an announcement), the admin
// routes that create clients and rotate secrets, the clients every server
// knows (the console, Medplum's CLI), and the super admin's client made at
// first start.
package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

// AuthClient is Medplum's Login.authMethod for a client's own login
// (client credentials).
const AuthClient = "client"

// Config is what the clients need to know.
type Config struct {
	BaseURL string
	// SecretGrace is how long a rotated-out client secret keeps working.
	SecretGrace time.Duration
	// DataDir, when set, receives superadmin.json with generated credentials.
	DataDir            string
	SuperAdminClientID string
	SuperAdminSecret   string
}

// Service keeps the client applications.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	repo     *repo.Repo
	secrets  *secrets.Store
	sessions *session.Store
	log      *slog.Logger

	cache   *expirable.LRU[string, *Client]
	members *session.MemberCache // the entries of clients' memberships
	subs    []*nats.Subscription
	locks   [64]sync.Mutex
}

// New wires the clients; Start watches for their changes.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sec *secrets.Store, sessions *session.Store, log *slog.Logger) *Service {
	if cfg.SecretGrace <= 0 {
		cfg.SecretGrace = 24 * time.Hour
	}
	return &Service{cfg: cfg, nc: nc, js: js, repo: r, secrets: sec, sessions: sessions, log: log,
		cache: expirable.NewLRU[string, *Client](maxClients, nil, clientTTL)}
}

// Start watches what changes what a client token means — a client, a
// membership, a policy, a secret rotated on another instance — and the
// clients' membership entries.
func (s *Service) Start(ctx context.Context) error {
	// Only those types: every other event (a bot's audit records, a
	// patient's updates) would be decoded here for nothing.
	for _, typ := range []string{"ClientApplication", "ProjectMembership", "AccessPolicy"} {
		sub, err := s.nc.Subscribe(bus.EventSubject(typ, "*"), s.onResourceEvent)
		if err != nil {
			return err
		}
		s.subs = append(s.subs, sub)
	}
	sub, err := s.nc.Subscribe(bus.ClientChangedSubject, func(m *nats.Msg) { s.Forget(string(m.Data)) })
	if err != nil {
		return err
	}
	s.subs = append(s.subs, sub)
	if s.members, err = session.WatchMembers(ctx, s.js, s.sessions, maxClients); err != nil {
		return fmt.Errorf("client memberships: %w", err)
	}
	return nil
}

// Stop stops watching.
func (s *Service) Stop() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	if s.members != nil {
		s.members.Stop()
	}
}

// standardClients are the clients every Medplum server knows without a
// stored ClientApplication: Medplum's command line tool signs in as
// "medplum-cli" through a callback on its own loopback port, without PKCE.
var standardClients = map[string]map[string]any{
	auth.CLIClientID: {
		"resourceType": "ClientApplication", "id": auth.CLIClientID, "name": "Medplum CLI",
		"redirectUris": []any{"http://localhost:9615"}, "pkceOptional": true,
	},
}

// ProjectOf is the name of a client's project, and whether it is a
// super-admin one, whose clients only super admins register.
func (s *Service) ProjectOf(ctx context.Context, id string) (name string, superAdmin bool, err error) {
	if id == "" {
		return "", false, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "Project", id)
	if fhir.Missing(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	var p struct {
		Name       string `json:"name"`
		SuperAdmin bool   `json:"superAdmin"`
	}
	err = json.Unmarshal(res.JSON, &p)
	return p.Name, p.SuperAdmin, err
}

// Builtin is a client known without a stored ClientApplication, or
// nil: Medplum's standard ones, and Pinion's administration console
// (gateway/console), which returns to this server's own /console/callback,
// with PKCE.
func Builtin(id, baseURL string) map[string]any {
	if c, ok := standardClients[id]; ok {
		return c
	}
	if id == auth.ConsoleClientID {
		return map[string]any{"resourceType": "ClientApplication", "id": auth.ConsoleClientID, "name": "Pinion console",
			"redirectUris": []any{baseURL + "console/callback"}}
	}
	return nil
}

// RegisteredRedirects are the redirect URIs a ClientApplication registered:
// redirectUri, then redirectUris; entries that are not strings are skipped.
func RegisteredRedirects(client map[string]any) []string {
	var registered []string
	if u, ok := client["redirectUri"].(string); ok {
		registered = append(registered, u)
	}
	if list, ok := client["redirectUris"].([]any); ok {
		for _, u := range list {
			if s, ok := u.(string); ok {
				registered = append(registered, s)
			}
		}
	}
	return registered
}

// SignInProject is the project a sign-in for clientID may reach, given the
// projectID it asked for, as Medplum confines it: the client must exist
// (404), a projectId that names another project is refused, and the code
// goes only to a membership in the client's project. First-party clients
// and clients registered in a super-admin project serve every project:
// then projectID as asked ("" for any).
func (s *Service) SignInProject(ctx context.Context, clientID, projectID string) (string, error) {
	if clientID == "" || Builtin(clientID, s.cfg.BaseURL) != nil {
		return projectID, nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", clientID)
	if err != nil {
		return "", err
	}
	_, anyProject, err := s.ProjectOf(ctx, res.Project)
	switch {
	case err != nil:
		return "", err
	case anyProject:
		return projectID, nil
	case projectID != "" && projectID != res.Project:
		return "", fhir.BadRequest("Invalid projectId", "projectId")
	}
	return res.Project, nil
}
