package membership

import (
	"context"
	"fmt"
	"net/mail"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

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

// inviteFields are the fields an invite may carry (Medplum's InviteRequest).
var inviteFields = map[string]bool{
	"resourceType": true, "firstName": true, "lastName": true, "email": true, "externalId": true,
	"scope": true, "password": true, "sendEmail": true, "admin": true, "membership": true,
	"upsert": true, "forceNewMembership": true, "mfaRequired": true, "accessPolicy": true, "access": true,
	"patient": true,
}

// membershipTemplateFields are the membership fields an invite may set.
var membershipTemplateFields = map[string]bool{
	"admin": true, "access": true, "accessPolicy": true, "externalId": true, "profile": true, "active": true, "userName": true,
}

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

// boolField reads a boolean that may come as a JSON boolean or as the
// strings "true"/"false" (forms, and some clients' sendEmail).
func boolField(m map[string]any, key string, issues *[]fhir.Issue) (bool, bool) {
	v, ok := m[key]
	if !ok || v == nil {
		return false, false
	}
	switch b := v.(type) {
	case bool:
		return b, true
	case string:
		switch b {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	*issues = append(*issues, fhir.FieldIssue(key, key+" must be a boolean"))
	return false, false
}

// invite is E2, POST /admin/projects/:projectId/invite.
func (s *Service) invite(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	projectID := r.Param("projectId")
	if err := access.ProjectAdmin(r.Principal, projectID); err != nil {
		return nil, err
	}
	body, err := inviteBody(r)
	if err != nil {
		return nil, err
	}
	req, err := s.validateInvite(ctx, projectID, body, r.Principal.User)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	rec := &invite.Record{
		ID: id, Request: *req, Status: "pending", Created: time.Now().UTC(), Updated: time.Now().UTC(),
		Steps: map[string]invite.StepState{
			invite.StepUser: {State: "pending"}, invite.StepProfile: {State: "pending"},
			invite.StepMembership: {State: "pending"}, invite.StepEmail: {State: "pending"},
		},
	}
	if !req.SendEmail || req.Email == "" {
		rec.Steps[invite.StepEmail] = invite.StepState{State: "skipped"}
	}
	// Listen for the end before starting, so a fast saga is not missed.
	done := make(chan struct{}, 1)
	sub, err := s.nc.Subscribe(invite.DoneSubject(id), func(*nats.Msg) {
		select {
		case done <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := s.invites.Create(ctx, rec); err != nil {
		return nil, fmt.Errorf("record invite: %w", err)
	}
	if err := s.invites.Next(ctx, invite.SubjUser, invite.Message{InviteID: id}); err != nil {
		return nil, err
	}
	wait := inviteWait
	if d, ok := ctx.Deadline(); ok && time.Until(d)-time.Second < wait {
		wait = time.Until(d) - time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	cur, err := s.invites.Get(context.WithoutCancel(ctx), id)
	if err != nil {
		return nil, err
	}
	switch {
	case cur.Status == "failed" && cur.Failure != nil:
		e := fhir.BadRequest(cur.Failure.Text)
		switch cur.Failure.Status {
		case 409:
			e = fhir.Conflict(cur.Failure.Text)
		case 404:
			e = fhir.NotFound()
		case 412:
			e = fhir.MultipleMatches()
		case 500:
			e = fhir.Internal()
		}
		return nil, e
	case cur.MembershipID == "" || cur.Steps[invite.StepMembership].State != "done":
		e := fhir.Timeout("Invite " + id + " is still in progress; it will complete")
		e.Outcome.Issue[0].Diagnostics = "invite/" + id
		return nil, e
	}
	pm, err := s.repo.Read(ctx, repo.System, "ProjectMembership", cur.MembershipID)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, pm.JSON), nil
}

// validateInvite checks every field before anything is written.
func (s *Service) validateInvite(ctx context.Context, projectID string, body map[string]any, invitedBy string) (*invite.Request, error) {
	pj, err := projects.Get(ctx, s.repo, projectID)
	if err != nil {
		return nil, err
	}

	var issues []fhir.Issue
	var unknown []string
	for k := range body {
		if !inviteFields[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		issues = append(issues, fhir.FieldIssue(k, "Unknown field: "+k))
	}
	str := func(k string) string {
		v, _ := body[k].(string)
		return strings.TrimSpace(v)
	}
	req := &invite.Request{ProjectID: projectID, ProjectName: pj.Name, InvitedBy: invitedBy}
	req.ResourceType = str("resourceType")
	switch req.ResourceType {
	case "Patient", "Practitioner", "RelatedPerson":
	default:
		issues = append(issues, fhir.FieldIssue("resourceType", "Resource type is required"))
	}
	if req.FirstName = str("firstName"); req.FirstName == "" {
		issues = append(issues, fhir.FieldIssue("firstName", "First name is required"))
	}
	if req.LastName = str("lastName"); req.LastName == "" {
		issues = append(issues, fhir.FieldIssue("lastName", "Last name is required"))
	}
	req.Email = strings.ToLower(str("email"))
	req.ExternalID = str("externalId")
	if req.Email != "" {
		if a, err := mail.ParseAddress(req.Email); err != nil || a.Address != req.Email {
			req.Email = ""
		}
	}
	if req.Email == "" && req.ExternalID == "" {
		issues = append(issues, fhir.FieldIssue("email", "Either email or externalId is required"))
	}
	scope := str("scope")
	if scope != "" && scope != "project" && scope != "server" {
		issues = append(issues, fhir.FieldIssue("scope", "Scope must be project or server"))
	}
	req.ProjectScoped = (req.ResourceType == "Patient" && scope != "server") || req.ExternalID != "" || scope == "project"
	if pw, ok := body["password"]; ok {
		p, _ := pw.(string)
		if len(p) < 8 {
			issues = append(issues, fhir.FieldIssue("password", "Invalid password, must be at least 8 characters"))
		} else {
			req.PasswordHash = auth.HashPassword(p)
		}
	}
	req.SendEmail = true
	if v, ok := boolField(body, "sendEmail", &issues); ok {
		req.SendEmail = v
	}
	req.Upsert, _ = boolField(body, "upsert", &issues)
	req.ForceNewMembership, _ = boolField(body, "forceNewMembership", &issues)
	boolField(body, "mfaRequired", &issues)
	admin, adminSet := boolField(body, "admin", &issues)

	// The membership template: deprecated top-level fields, then `membership`, which wins.
	tmpl := map[string]any{}
	if v, ok := body["accessPolicy"]; ok {
		tmpl["accessPolicy"] = v
	}
	if v, ok := body["access"]; ok {
		tmpl["access"] = v
	}
	if adminSet {
		tmpl["admin"] = admin
	}
	if req.ExternalID != "" {
		tmpl["externalId"] = req.ExternalID
	}
	if mv, ok := body["membership"]; ok {
		m, isObj := mv.(map[string]any)
		if !isObj {
			issues = append(issues, fhir.FieldIssue("membership", "membership must be an object"))
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !membershipTemplateFields[k] {
				issues = append(issues, fhir.FieldIssue("membership."+k, "An invite cannot set membership."+k))
				continue
			}
			tmpl[k] = m[k]
		}
	}
	if v, ok := tmpl["admin"]; ok {
		if _, isBool := v.(bool); !isBool {
			issues = append(issues, fhir.FieldIssue("membership.admin", "admin must be a boolean"))
		}
	} else {
		// Stored explicitly, so E3's documented patch (replace /admin) applies:
		// RFC 6902 replace needs the member to exist.
		tmpl["admin"] = false
	}
	if pv, ok := body["patient"]; ok && req.ResourceType != "RelatedPerson" {
		issues = append(issues, fhir.FieldIssue("patient", "patient is only for RelatedPerson invites"))
	} else if ok {
		ref, _ := refOf(pv)
		if t, _, ok := fhir.SplitReference(ref); !ok || t != "Patient" {
			issues = append(issues, fhir.FieldIssue("patient", "patient must be a Patient reference"))
		}
		req.Patient = ref
	}
	if len(issues) > 0 {
		return nil, fhir.Invalid(issues...)
	}
	if req.Patient != "" {
		_, id, _ := fhir.SplitReference(req.Patient)
		if _, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "Patient", id); fhir.Missing(err) {
			return nil, fhir.BadRequest("Patient "+req.Patient+" does not exist in this project", "patient")
		} else if err != nil {
			return nil, err
		}
	} else if req.ResourceType == "RelatedPerson" && tmpl["profile"] == nil {
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
	if err := s.checkPolicies(ctx, projectID, tmpl); err != nil {
		return nil, err
	}
	if p, ok := tmpl["profile"]; ok {
		ref, err := s.checkProfile(ctx, projectID, req.ResourceType, p)
		if err != nil {
			return nil, err
		}
		req.Profile = ref
		delete(tmpl, "profile")
	}
	if invitedBy != "" {
		tmpl["invitedBy"] = map[string]any{"reference": invitedBy}
	}
	req.Membership = tmpl
	return req, nil
}

// checkPolicies checks that every access policy a membership names exists
// in the project.
func (s *Service) checkPolicies(ctx context.Context, projectID string, m map[string]any) error {
	var refs []struct{ expr, ref string }
	if ap, ok := m["accessPolicy"]; ok {
		ref, _ := refOf(ap)
		refs = append(refs, struct{ expr, ref string }{"membership.accessPolicy", ref})
	}
	if a, ok := m["access"]; ok {
		list, isList := a.([]any)
		if !isList {
			return fhir.BadRequest("access must be an array", "membership.access")
		}
		for i, e := range list {
			entry, _ := e.(map[string]any)
			ref, _ := refOf(entry["policy"])
			refs = append(refs, struct{ expr, ref string }{fmt.Sprintf("membership.access[%d].policy", i), ref})
			if p, ok := entry["parameter"]; ok {
				if _, isList := p.([]any); !isList {
					return fhir.BadRequest("parameter must be an array", fmt.Sprintf("membership.access[%d].parameter", i))
				}
			}
		}
	}
	for _, r := range refs {
		if err := projects.CheckPolicy(ctx, s.repo, projectID, r.ref, r.expr); err != nil {
			return err
		}
	}
	return nil
}

// checkProfile checks a profile named in membership.profile.
func (s *Service) checkProfile(ctx context.Context, projectID, resourceType string, v any) (string, error) {
	ref, ok := refOf(v)
	typ, id, ok2 := fhir.SplitReference(ref)
	if !ok || !ok2 {
		return "", fhir.BadRequest("Invalid profile reference", "membership.profile")
	}
	res, err := s.repo.Read(ctx, repo.System, typ, id)
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

func refOf(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	s, ok := m["reference"].(string)
	return s, ok
}
