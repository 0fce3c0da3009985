// Package projects is what several services do with projects: read one for
// an admin route, check that an access policy belongs to it, create a
// client application or bot with a membership of its own, give a person a
// profile and membership (member.go), and project memberships into the
// session bucket (projector.go).
package projects

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
)

// Info is what the admin routes need of a project.
type Info struct {
	ID         string
	Name       string          `json:"name"`
	SuperAdmin bool            `json:"superAdmin"`
	Owner      *fhir.Reference `json:"owner"`
}

// Read reads a project resource; a missing or deleted one is 404.
func Read(ctx context.Context, r *repo.Repo, id string) (*repo.Resource, error) {
	res, err := r.Read(ctx, repo.AllProjects, "Project", id)
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status < 500 {
			return nil, fhir.NotFound()
		}
		return nil, err
	}
	return res, nil
}

// Get reads what the admin routes need of a project; a missing one is 404.
func Get(ctx context.Context, r *repo.Repo, id string) (*Info, error) {
	res, err := Read(ctx, r, id)
	if err != nil {
		return nil, err
	}
	p := &Info{ID: id}
	if err := json.Unmarshal(res.JSON, p); err != nil {
		return nil, err
	}
	return p, nil
}

// CheckPolicyRef checks that ref names an AccessPolicy of the project; a 400
// naming expr otherwise.
func CheckPolicyRef(ctx context.Context, r *repo.Repo, projectID, ref, expr string) error {
	typ, id, ok := fhir.SplitReference(ref)
	if !ok || typ != "AccessPolicy" {
		return fhir.BadRequest("Invalid access policy reference", expr)
	}
	res, err := r.Read(ctx, repo.AllProjects, "AccessPolicy", id)
	if fhir.Missing(err) {
		return fhir.BadRequest("Access policy "+ref+" does not exist", expr)
	}
	if err != nil {
		return err
	}
	if res.Project != projectID {
		return fhir.BadRequest("Access policy "+ref+" does not belong to this project", expr)
	}
	return nil
}

// Agent is what a client application or bot is created from: the resource
// (its id chosen by the caller) and the membership it acts under.
type Agent struct {
	Resource  map[string]any
	ID        string
	Policy    *fhir.Reference
	Author    string // the admin's profile, for meta.author
	InvitedBy string // the admin's user
}

// CreateAgent creates a ClientApplication or Bot and a membership whose user
// and profile are itself, and has its rights projected to the session
// bucket so its tokens work at once. When a later step fails, what was
// written is deleted again: no client or bot is left without its
// membership.
func CreateAgent(ctx context.Context, r *repo.Repo, nc *nats.Conn, p *Info, a Agent) (*repo.Resource, error) {
	typ, _ := a.Resource["resourceType"].(string)
	res, err := r.Create(ctx, repo.Scope{Project: p.ID}, a.Resource, repo.WriteOptions{ID: a.ID, Project: p.ID, Author: a.Author})
	if err != nil {
		return nil, err
	}
	ref := typ + "/" + res.ID
	display, _ := a.Resource["name"].(string)
	m, err := resource.Map(agentMembership(p, ref, display, a))
	var pm *repo.Resource
	if err == nil {
		pm, err = r.Create(ctx, repo.Scope{Project: p.ID}, m, repo.WriteOptions{Project: p.ID})
	}
	if err == nil {
		_, err = Project(ctx, nc, "ProjectMembership", pm.ID, p.ID)
	}
	if err != nil {
		// The request may be what failed; the clean-up must not be cut short.
		undo := context.WithoutCancel(ctx)
		if pm != nil {
			_ = r.Delete(undo, repo.AllProjects, "ProjectMembership", pm.ID)
		}
		_ = r.Delete(undo, repo.AllProjects, typ, res.ID)
		return nil, err
	}
	return res, nil
}

// agentMembership is the membership of an agent (ref, named display) that
// is its own user and profile, and never an admin.
func agentMembership(p *Info, ref, display string, a Agent) *resource.ProjectMembership {
	m := &resource.ProjectMembership{
		ResourceType: "ProjectMembership",
		Project:      resource.Reference{Reference: "Project/" + p.ID, Display: p.Name},
		User:         resource.Reference{Reference: ref, Display: display},
		Profile:      resource.Reference{Reference: ref, Display: display},
		Admin:        new(false),
	}
	if a.Policy != nil {
		m.AccessPolicy = &resource.Reference{Reference: a.Policy.Reference}
	}
	if a.InvitedBy != "" {
		m.InvitedBy = &resource.Reference{Reference: a.InvitedBy}
	}
	return m
}

// AgentRequest is what an admin route that creates a client application
// or bot has checked before it writes.
type AgentRequest struct {
	Project  *Info
	Resource map[string]any
	Policy   *fhir.Reference
}

// AgentInput is such a route's request, as its handler read it.
type AgentInput struct {
	By        *bus.Principal
	ProjectID string
	JSON      bool // the body's media type is JSON
	Body      []byte
}

// ReadAgentRequest makes the checks both such routes share: the caller
// administers the project, the body (see agentBody) gives a name ("<label>
// name is required" otherwise), the project exists and the access policy,
// if any, is one of its.
func ReadAgentRequest(ctx context.Context, rp *repo.Repo, in AgentInput, typ, label string, serverSet ...string) (*AgentRequest, error) {
	projectID := in.ProjectID
	if err := access.AdminWrite(in.By, projectID, typ); err != nil {
		return nil, err
	}
	if !in.JSON {
		return nil, fhir.UnsupportedMediaType()
	}
	res, policy, err := agentBody(in.Body, typ, serverSet...)
	if err != nil {
		return nil, err
	}
	if name, _ := res["name"].(string); strings.TrimSpace(name) == "" {
		return nil, fhir.BadRequest(label+" name is required", "name")
	}
	project, err := Get(ctx, rp, projectID)
	if err != nil {
		return nil, err
	}
	if policy != nil {
		if err := CheckPolicyRef(ctx, rp, projectID, policy.Reference, "accessPolicy"); err != nil {
			return nil, err
		}
	}
	return &AgentRequest{Project: project, Resource: res, Policy: policy}, nil
}

// agentBody reads the body of an admin route that creates a typ
// (ClientApplication or Bot): a JSON object of the resource's own fields,
// plus accessPolicy for its membership. id, meta and the fields in
// serverSet are the server's to set: naming one is a 400, not silently
// dropped, so a caller never believes it chose them. The rest is checked
// against the resource's definition when it is written.
func agentBody(body []byte, typ string, serverSet ...string) (map[string]any, *fhir.Reference, error) {
	res, err := fhir.Decode(body)
	if err != nil {
		return nil, nil, err
	}
	// Forms send the fields left blank ("redirectUri": ""): absent, as
	// Medplum reads them, before anything checks them.
	fhir.DropEmpty(res)
	if rt, ok := res["resourceType"]; ok && rt != typ {
		return nil, nil, fhir.BadRequest("Incorrect resource type", "resourceType")
	}
	res["resourceType"] = typ
	for _, f := range append([]string{"id", "meta"}, serverSet...) {
		if _, ok := res[f]; ok {
			return nil, nil, fhir.BadRequest(typ+"."+f+" is set by the server", f)
		}
	}
	raw, ok := res["accessPolicy"]
	if !ok || raw == nil {
		delete(res, "accessPolicy")
		return res, nil, nil
	}
	delete(res, "accessPolicy")
	m, _ := raw.(map[string]any)
	ref, _ := m["reference"].(string)
	if ref == "" {
		return nil, nil, fhir.BadRequest("Invalid access policy reference", "accessPolicy")
	}
	return res, &fhir.Reference{Reference: ref}, nil
}

// membershipDoc is what a session entry is made of in a ProjectMembership.
type membershipDoc struct {
	Project      fhir.Reference   `json:"project"`
	User         fhir.Reference   `json:"user"`
	Profile      fhir.Reference   `json:"profile"`
	Admin        bool             `json:"admin"`
	Active       *bool            `json:"active"`
	AccessPolicy *fhir.Reference  `json:"accessPolicy"`
	Access       []map[string]any `json:"access"`
	Extension    []extension      `json:"extension"`
}

// Entry is what a membership allows, for the session bucket: the one way a
// ProjectMembership becomes a session entry. superAdmin is its project's
// flag; addresses are its policies' address rules (access.AddressRules).
// A super admin is a member of a super-admin project, whatever the
// membership says.
func Entry(membership []byte, superAdmin bool, addresses []session.AddressRule) (*session.Membership, error) {
	var m membershipDoc
	if err := json.Unmarshal(membership, &m); err != nil {
		return nil, err
	}
	_, projectID, _ := fhir.SplitReference(m.Project.Reference)
	return &session.Membership{
		Project: projectID, User: m.User.Reference, Profile: m.Profile.Reference, Admin: m.Admin,
		SuperAdmin: superAdmin, Active: m.Active == nil || *m.Active,
		AccessPolicy: m.AccessPolicy != nil || len(m.Access) > 0, Addresses: addresses,
		MFARequired: mfaRequired(m.Extension),
	}, nil
}

// ProfileByEmail finds the project's one resource of type typ (a profile:
// Patient, Practitioner, RelatedPerson) with that e-mail, as Medplum's
// invite finds a profile to reuse: "" when there is none, 412 when there
// are several.
func ProfileByEmail(ctx context.Context, r *repo.Repo, project, typ, email string) (string, error) {
	if email == "" {
		return "", nil
	}
	q, err := search.Parse(typ, url.Values{"email": {email}, "_count": {"2"}})
	if err != nil {
		return "", err
	}
	page, err := r.Search(ctx, repo.Scope{Project: project}, typ, q)
	if err != nil {
		return "", err
	}
	switch len(page.Resources) {
	case 0:
		return "", nil
	case 1:
		return typ + "/" + page.Resources[0].ID, nil
	}
	return "", fhir.MultipleMatches()
}
