package access

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// Reader reads one resource; *repo.Repo is one.
type Reader interface {
	Read(ctx context.Context, sc repo.Scope, typ, id string) (*repo.Resource, error)
}

// Policies finds the compiled policy of a principal. Reading its membership
// and policies goes through the repository's read cache, which change
// events keep current; the compiled policy is cached under the versions it
// was built from, so a changed membership or policy is compiled afresh on
// its next use and the old one simply ages out.
type Policies struct {
	store Reader
	log   *slog.Logger
	cache *lru.Cache[string, *Policy]
}

// NewPolicies makes a Policies reading through store.
func NewPolicies(store Reader, log *slog.Logger) *Policies {
	if log == nil {
		log = slog.Default()
	}
	c, _ := lru.New[string, *Policy](10_000)
	return &Policies{store: store, log: log, cache: c}
}

// invalidConfig is Medplum's answer for a membership whose policy cannot
// be used.
func invalidConfig() error {
	return fhir.BadRequest("Invalid access policy configuration. Please contact your administrator to update your project membership.")
}

// For returns the policy of a principal: 401 for an anonymous caller or a
// membership that no longer exists; 400 when a policy it names cannot be
// read or compiled (it fails closed, as Medplum does at sign-in).
func (ps *Policies) For(ctx context.Context, p *bus.Principal) (*Policy, error) {
	if p == nil {
		return nil, fhir.Unauthorized()
	}
	// A super admin's membership is read only when it names a policy.
	if p.SuperAdmin && !p.AccessPolicy || p.Membership == "" {
		if p.AccessPolicy && !p.SuperAdmin {
			return nil, invalidConfig()
		}
		return Compile(p, nil, nil)
	}
	m, err := ps.store.Read(ctx, repo.AllProjects, "ProjectMembership", p.Membership)
	if err != nil {
		if fhir.Missing(err) {
			return nil, fhir.Unauthorized()
		}
		return nil, err
	}
	if m.Project != p.Project {
		return nil, fhir.Unauthorized()
	}
	grants, err := ps.grantsOf(m)
	if err != nil {
		return nil, err
	}
	var key strings.Builder
	key.WriteString(p.Membership + "@" + m.VersionID + "|" + p.User + "|" + p.Project + "|" + strconv.FormatBool(p.Admin) + "|" + p.Scope + "|" + p.Patient)
	bodies := map[string][]byte{}
	for _, g := range grants {
		if _, done := bodies[g.ref]; done {
			continue
		}
		typ, id, ok := fhir.SplitReference(g.ref)
		if !ok || typ != "AccessPolicy" {
			ps.log.Warn("access policy", "membership", p.Membership, "policy", g.ref, "err", "not an AccessPolicy reference")
			return nil, invalidConfig()
		}
		res, err := ps.store.Read(ctx, repo.Scope{Project: p.Project}, "AccessPolicy", id)
		if err != nil {
			if fhir.Missing(err) {
				ps.log.Warn("access policy", "membership", p.Membership, "policy", g.ref, "err", err)
				return nil, invalidConfig()
			}
			return nil, err
		}
		bodies[g.ref] = res.JSON
		key.WriteString("|" + g.ref + "@" + res.VersionID)
	}
	k := key.String()
	if pol, ok := ps.cache.Get(k); ok {
		return pol, nil
	}
	pol, err := Compile(p, m.JSON, bodies)
	if err != nil {
		ps.log.Warn("access policy", "membership", p.Membership, "err", err)
		return nil, invalidConfig()
	}
	ps.cache.Add(k, pol)
	return pol, nil
}

// grantsOf returns a membership version's policy uses, decoded once.
func (ps *Policies) grantsOf(m *repo.Resource) ([]grant, error) {
	g, err := repo.Memo(m, "access.grants", func(b []byte) ([]grant, error) {
		var md membershipDoc
		if err := json.Unmarshal(b, &md); err != nil {
			return nil, err
		}
		return md.grants()
	})
	if err != nil {
		ps.log.Warn("access policy", "membership", m.ID, "err", err)
		return nil, invalidConfig()
	}
	return g, nil
}
