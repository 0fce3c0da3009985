package membership

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
)

// inviteWait bounds how long POST .../invite waits for its saga before
// answering 504 with the invite id (the saga still completes).
var inviteWait = 15 * time.Second

// inviteBody reads a JSON or form-encoded invite into a map.
func inviteBody(r *bus.Request) (map[string]any, error) {
	switch r.MediaType() {
	case "application/json", "application/fhir+json":
		return fhir.Decode(r.Body)
	case "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(r.Body))
		if err != nil {
			return nil, fhir.BadRequest("Content could not be parsed")
		}
		m := map[string]any{}
		for k, v := range form {
			m[k] = v[0]
		}
		return m, nil
	}
	return nil, fhir.UnsupportedMediaType()
}

// invite is POST /admin/projects/{projectId}/invite (E2 in docs/API.md).
func (s *Service) invite(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	body, err := inviteBody(r)
	if err != nil {
		return nil, err
	}
	pm, err := s.inviteMember(ctx, r.Principal, projectID, body)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, pm.JSON), nil
}

// inviteMember runs an invite (a decoded body, from an admin of the
// project) to its end, and returns the membership it made or found.
func (s *Service) inviteMember(ctx context.Context, by *bus.Principal, projectID string, body map[string]any) (*repo.Resource, error) {
	req, err := s.validateInvite(ctx, projectID, body, s.inviter(ctx, by))
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	rec := invite.NewRecord(id, *req, time.Now().UTC())
	// Listen for the end before starting, so a fast saga is not missed.
	done := make(chan *invite.Record, 1)
	sub, err := s.nc.Subscribe(invite.DoneSubject(id), func(m *nats.Msg) {
		select {
		case done <- invite.Announced(m.Data):
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := s.startInvite(ctx, rec); err != nil {
		return nil, err
	}
	timer := time.NewTimer(inviteWaitFor(ctx))
	defer timer.Stop()
	var cur *invite.Record
	select {
	case cur = <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	if cur == nil { // no end announced with its outcome: the record says
		if cur, err = s.invites.Get(context.WithoutCancel(ctx), id); err != nil {
			return nil, err
		}
	}
	memberID, err := inviteOutcome(cur)
	if err != nil {
		return nil, err
	}
	return s.repo.Read(ctx, repo.AllProjects, "ProjectMembership", memberID)
}

// startInvite stores the invite's record and publishes its first step.
// A record whose step never reaches the stream would stay pending for
// ever (a NATS server lost between the two, or an acknowledgement lost
// with it), so both are tried again — the record's key and the step's
// message id make a repeat harmless — while the request has time, and an
// invite that cannot start is then marked failed.
func (s *Service) startInvite(ctx context.Context, rec *invite.Record) error {
	deadline := time.Now().Add(min(inviteStart, inviteWaitFor(ctx)))
	stored := false
	err := retryUntil(ctx, deadline, func() error {
		if !stored {
			err := s.invites.Create(ctx, rec)
			if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("record invite: %w", err)
			}
			stored = true
		}
		return s.invites.Begin(ctx, rec.ID)
	})
	if err == nil {
		return nil
	}
	s.log.Error("invite not started", "invite", rec.ID, "err", err)
	// Fail the record unless its first step has done its work after all
	// (a publish stored but not acknowledged in time): then the saga
	// carries on, and ends it. A step still at work when the record fails
	// stops at the next step, leaving at most a User, whom a later invite
	// of the same address finds. This runs past the request's deadline
	// (for at most inviteStart): a record must not stay pending.
	refusal := fhir.Unavailable("The invite could not be started; try again")
	f := invite.NewFailure(refusal)
	if uerr := retryUntil(context.WithoutCancel(ctx), time.Now().Add(inviteStart), func() error {
		_, err := s.invites.Update(context.WithoutCancel(ctx), rec.ID, func(r *invite.Record) error {
			if r.Status == "pending" && r.Steps[invite.StepUser].State == "pending" {
				r.Status, r.Failure = "failed", f
			}
			return nil
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // never stored: nothing is pending
		}
		return err
	}); uerr != nil {
		s.log.Error("invite left pending", "invite", rec.ID, "err", uerr)
	}
	return refusal
}

// inviteStart bounds the tries to start an invite (and to fail one that
// would not start): a NATS cluster elects a new leader within seconds.
const inviteStart = 5 * time.Second

// retryUntil runs f until it succeeds, the deadline passes or ctx ends,
// waiting twice as long after each failure.
func retryUntil(ctx context.Context, deadline time.Time, f func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := f()
		if err == nil || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait *= 2
	}
}

// inviteWaitFor is how long the request waits for its saga: inviteWait, or
// less when the caller's deadline is nearer, keeping a second to answer.
func inviteWaitFor(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d) - time.Second; left < inviteWait {
			return left
		}
	}
	return inviteWait
}

// inviteOutcome reads an invite's record once the wait is over: the
// membership it made, the failing step's error as the step made it, or 504
// with the invite's id while it is still running.
func inviteOutcome(rec *invite.Record) (string, error) {
	switch {
	case rec.Status == "failed" && rec.Failure != nil:
		return "", rec.Failure.Err()
	case rec.MembershipID == "" || rec.Steps[invite.StepMembership].State != "done":
		e := fhir.Timeout("Invite " + rec.ID + " is still in progress; it will complete")
		e.Outcome.Issue[0].Diagnostics = "invite/" + rec.ID
		return "", e
	}
	return rec.MembershipID, nil
}

// inviter is who invites, as the membership records it: the principal's
// user, named after its profile (a person's name, a client's or bot's) as
// Medplum's membership page shows it. A profile that cannot be read leaves
// the reference unnamed; the invite does not depend on it.
func (s *Service) inviter(ctx context.Context, by *bus.Principal) fhir.Reference {
	ref := fhir.Reference{Reference: by.User}
	typ, id, ok := fhir.SplitReference(by.Profile)
	if !ok {
		return ref
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
	if err != nil {
		if !fhir.Missing(err) {
			s.log.WarnContext(ctx, "invite: the inviter's profile is unreadable", "profile", by.Profile, "err", err)
		}
		return ref
	}
	profile, err := res.Decode()
	if err == nil {
		ref.Display = profileName(profile)
	}
	return ref
}

// profileName is a profile's name as Medplum displays it: a client's or
// bot's name, or a person's first name, its text or given and family
// names; "" for none.
func profileName(profile map[string]any) string {
	switch name := profile["name"].(type) {
	case string:
		return name
	case []any:
		if len(name) == 0 {
			return ""
		}
		n, _ := name[0].(map[string]any)
		if text, _ := n["text"].(string); text != "" {
			return text
		}
		var parts []string
		given, _ := n["given"].([]any)
		for _, g := range given {
			if g, _ := g.(string); g != "" {
				parts = append(parts, g)
			}
		}
		if family, _ := n["family"].(string); family != "" {
			parts = append(parts, family)
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// validateInvite checks an invite before anything is written: its fields
// by themselves (checkInvite), then against the project's data. The order
// of the checks decides which error a caller sees first.
func (s *Service) validateInvite(ctx context.Context, projectID string, body map[string]any, invitedBy fhir.Reference) (*invite.Request, error) {
	pj, err := projects.Get(ctx, s.repo, projectID)
	if err != nil {
		return nil, err
	}
	d, issues := checkInvite(readInvite(body))
	if len(issues) > 0 {
		return nil, fhir.Invalid(issues...)
	}
	req := &d.Request
	req.ProjectID, req.ProjectName, req.InvitedBy = projectID, pj.Name, invitedBy.Reference
	if req.Patient != "" {
		_, id, _ := fhir.SplitReference(req.Patient)
		if _, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "Patient", id); fhir.Missing(err) {
			return nil, fhir.BadRequest("Patient "+req.Patient+" does not exist in this project", "patient")
		} else if err != nil {
			return nil, err
		}
	} else if req.ResourceType == "RelatedPerson" && d.Profile.Value == nil {
		// As in Medplum, a RelatedPerson of the project with this e-mail is
		// the profile, and needs no patient; a new one does, for FHIR
		// requires RelatedPerson.patient: say so before anything is written.
		ref, err := projects.ProfileByEmail(ctx, s.repo, projectID, "RelatedPerson", req.Email)
		if err != nil {
			return nil, err
		}
		if ref == "" {
			return nil, fhir.BadRequest("patient is required to invite a RelatedPerson", "patient")
		}
		req.Profile = ref
	}
	if err := s.checkPolicies(ctx, projectID, req.Membership); err != nil {
		return nil, err
	}
	if d.Profile.Set {
		if req.Profile, err = s.checkProfile(ctx, projectID, req.ResourceType, d.Profile.Value); err != nil {
			return nil, err
		}
	}
	if invitedBy.Reference != "" {
		by := map[string]any{"reference": invitedBy.Reference}
		if invitedBy.Display != "" {
			by["display"] = invitedBy.Display
		}
		req.Membership["invitedBy"] = by
	}
	// Hashed last: argon2 is slow on purpose, and wasted on a refused invite.
	if d.Password != "" {
		// An admin's choice of password is held to what a person's own is.
		if s.breach.Breached(ctx, d.Password) {
			return nil, fhir.Invalid(fhir.FieldIssue("password", auth.BreachedText))
		}
		if req.PasswordHash, err = auth.HashPassword(ctx, d.Password); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// checkPolicies checks that every access policy a membership names exists
// in the project.
func (s *Service) checkPolicies(ctx context.Context, projectID string, m map[string]any) error {
	refs, err := policyRefs(m)
	if err != nil {
		return err
	}
	for _, r := range refs {
		if err := projects.CheckPolicyRef(ctx, s.repo, projectID, r.ref, r.expr); err != nil {
			return err
		}
	}
	return nil
}

// checkProfile checks a profile named in membership.profile: it exists, in
// the project, and is of the invite's resource type.
func (s *Service) checkProfile(ctx context.Context, projectID, resourceType string, v any) (string, error) {
	typ, id, err := profileRef(v)
	if err != nil {
		return "", err
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, typ, id)
	if fhir.Missing(err) {
		return "", fhir.NotFound()
	}
	if err != nil {
		return "", err
	}
	if res.Project != projectID {
		return "", fhir.BadRequest("Profile does not belong to project", "membership.profile")
	}
	if typ != resourceType {
		return "", fhir.BadRequest("Profile resourceType does not match request", "membership.profile")
	}
	return typ + "/" + id, nil
}
