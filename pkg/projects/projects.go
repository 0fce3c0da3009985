// Package projects is what several services do with projects: read one for
// an admin route, check that an access policy belongs to it, and give a
// client application or bot a membership of its own.
package projects

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// Info is what the admin routes need of a project.
type Info struct {
	ID         string
	Name       string          `json:"name"`
	SuperAdmin bool            `json:"superAdmin"`
	Owner      *fhir.Reference `json:"owner"`
}

// Get reads a project; a missing one is 404.
func Get(ctx context.Context, r *repo.Repo, id string) (*Info, error) {
	res, err := r.Read(ctx, repo.System, "Project", id)
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status < 500 {
			return nil, fhir.NotFound()
		}
		return nil, err
	}
	p := &Info{ID: id}
	if err := json.Unmarshal(res.JSON, p); err != nil {
		return nil, err
	}
	return p, nil
}

// CheckPolicy checks that ref names an AccessPolicy of the project; a 400
// naming expr otherwise.
func CheckPolicy(ctx context.Context, r *repo.Repo, projectID, ref, expr string) error {
	typ, id, ok := fhir.SplitReference(ref)
	if !ok || typ != "AccessPolicy" {
		return fhir.BadRequest("Invalid access policy reference", expr)
	}
	res, err := r.Read(ctx, repo.System, "AccessPolicy", id)
	if err != nil {
		return fhir.BadRequest("Access policy "+ref+" does not exist", expr)
	}
	if res.Project != projectID {
		return fhir.BadRequest("Access policy "+ref+" does not belong to this project", expr)
	}
	return nil
}

// AddOwnMembership gives a ClientApplication or Bot (ref) a membership
// whose user and profile are itself, and records its rights in the session
// bucket so its tokens work at once.
func AddOwnMembership(ctx context.Context, r *repo.Repo, sessions *session.Store, p *Info, ref, display string, policy *fhir.Reference, invitedBy string) error {
	m := map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + p.ID, "display": p.Name},
		"user":         map[string]any{"reference": ref, "display": display},
		"profile":      map[string]any{"reference": ref, "display": display},
		"admin":        false,
	}
	if policy != nil {
		m["accessPolicy"] = map[string]any{"reference": policy.Reference}
	}
	if invitedBy != "" {
		m["invitedBy"] = map[string]any{"reference": invitedBy}
	}
	pm, err := r.Create(ctx, repo.Scope{Project: p.ID}, m, repo.WriteOptions{Project: p.ID})
	if err != nil {
		return err
	}
	_, err = sessions.PutMembership(ctx, pm.ID, session.Membership{
		Project: p.ID, User: ref, Profile: ref, SuperAdmin: p.SuperAdmin, Active: true, AccessPolicy: policy != nil,
	})
	return err
}
