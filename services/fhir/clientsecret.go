package fhirsvc

import (
	"context"
	"crypto/subtle"
	"encoding/json"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/clientsecret"
	"github.com/pinion-health/pinion/pkg/repo"
)

// withSecret is res as the caller sees it, with, for a ClientApplication,
// its current secret when the caller administers the client's project (or
// is a super admin) and their policy does not hide the field: Medplum's web
// app shows it on the client's page. Nobody else, and no admin of another
// project, ever gets it.
func (s *Service) withSecret(ctx context.Context, p *bus.Principal, pol *access.Policy, res *repo.Resource) (*repo.Resource, error) {
	if res.Type != "ClientApplication" || res.Deleted || !administers(p, res.Project) {
		return res, nil
	}
	secret, err := clientsecret.For(s.repo).Shown(ctx, res.ID)
	if err != nil {
		// The client is still worth showing without its secret.
		s.log.Warn("client secret not shown", "client", res.ID, "err", err)
		return res, nil
	}
	if secret == "" {
		return res, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(res.JSON, &m); err != nil {
		return nil, err
	}
	m["secret"], _ = json.Marshal(secret)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := &repo.Resource{Type: res.Type, ID: res.ID, VersionID: res.VersionID, LastUpdated: res.LastUpdated, Project: res.Project, JSON: b}
	// The caller's policy may hide the field from admins too.
	return pol.Redact(out)
}

// administers reports whether p is an admin of project or a super admin.
func administers(p *bus.Principal, project string) bool {
	return p != nil && (p.SuperAdmin || p.Admin && p.Project == project)
}

// dropShownSecret removes from an update of ClientApplication/id the
// secret the client has now: what a form read with the secret sends back
// unchanged. Any other secret stays, and the write refuses it (secrets
// change only by $rotate-secret).
func (s *Service) dropShownSecret(ctx context.Context, id string, res map[string]any) {
	sent, ok := res["secret"].(string)
	if !ok || sent == "" {
		return
	}
	cur, err := clientsecret.For(s.repo).Shown(ctx, id)
	if err != nil || cur == "" {
		return
	}
	if subtle.ConstantTimeCompare([]byte(sent), []byte(cur)) == 1 {
		delete(res, "secret")
	}
}
