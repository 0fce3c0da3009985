package signin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/web"
)

// SMART App Launch context (SMART 2.x, "Launch context arrives with your
// access token"). An EHR launch names a SmartAppLaunch the person's EHR
// session created (Medplum's shape: patient, encounter, fhirContext) as
// the request's launch parameter, with the launch scope; a standalone
// launch asks for launch/patient, and a practitioner chooses the patient
// on a page listing only patients their policy lets them read. Either way
// the context is written on the login: the token answer carries it, and
// the login's patient/ scopes reach that patient's compartment only.

// launchLifetime bounds how long after its creation a SmartAppLaunch can
// start a sign-in: the EHR creates it and opens the app at once.
const launchLifetime = 10 * time.Minute

// Launch scopes, as SMART names them.
const (
	scopeLaunch        = "launch"
	scopeLaunchPatient = "launch/patient"
)

// invalidLaunch is Medplum's answer to a launch that cannot be used.
func (a AuthRequest) invalidLaunch() *bus.Response {
	return a.fail("invalid_request", "Invalid launch")
}

// checkLaunch is the check of an EHR launch before anyone signs in: the
// launch exists and is fresh. Whose it is waits for the membership.
func (s *Service) checkLaunch(ctx context.Context, a AuthRequest) (*bus.Response, error) {
	if a.Launch == "" {
		return nil, nil
	}
	if !authserver.HasScope(a.Scope, scopeLaunch) {
		return a.fail("invalid_scope", "A launch needs the launch scope"), nil
	}
	_, refused, err := s.readLaunch(ctx, a)
	return refused, err
}

// readLaunch reads the request's SmartAppLaunch, refused when it is
// missing, deleted or too old.
func (s *Service) readLaunch(ctx context.Context, a AuthRequest) (*repo.Resource, *bus.Response, error) {
	if len(a.Launch) > 64 {
		return nil, a.invalidLaunch(), nil
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "SmartAppLaunch", a.Launch)
	if fhir.Missing(err) || err == nil && time.Since(res.LastUpdated) > launchLifetime {
		return nil, a.invalidLaunch(), nil
	}
	return res, nil, err
}

// launchContext is the launch context the request asks for, for the
// membership chosen: nil without a launch scope; a page when the person
// must still choose a patient; a refusal sent to the client when the
// launch is another project's or person's, spent or stale.
func (s *Service) launchContext(ctx context.Context, b web.Browser, a AuthRequest, bs *BrowserSession, membership string, form url.Values) (*session.Launch, *bus.Response, error) {
	ehr := a.Launch != "" && authserver.HasScope(a.Scope, scopeLaunch)
	standalone := !ehr && authserver.HasScope(a.Scope, scopeLaunchPatient)
	if !ehr && !standalone {
		return nil, nil, nil
	}
	m, err := s.sessions.GetMembership(ctx, membership)
	if err != nil {
		return nil, nil, err
	}
	if ehr {
		return s.ehrLaunch(ctx, a, m)
	}
	if t, id, _ := fhir.SplitReference(m.Profile); t == "Patient" {
		// A patient's standalone launch is about themselves.
		return &session.Launch{Patient: id, Scope: scopeLaunchPatient}, nil, nil
	}
	gate, err := s.patientGate(ctx, bs, membership, m)
	if err != nil {
		return nil, nil, err
	}
	if id := form.Get("patient"); id != "" && !form.Has("patient_search") {
		// The posted choice is checked again: a form is the browser's.
		if _, err := gate.Read(ctx, id); err != nil {
			if fhir.Missing(err) || errors.Is(err, fhir.ErrForbidden) {
				return nil, a.fail("access_denied", "The patient chosen cannot be read"), nil
			}
			return nil, nil, err
		}
		return &session.Launch{Patient: id, Scope: scopeLaunchPatient}, nil, nil
	}
	page, err := s.patientPage(ctx, b, a, membership, gate, form)
	return nil, page, err
}

// ehrLaunch takes the request's SmartAppLaunch for membership m: it must
// be m's project's, created by m's profile, fresh, and not used before.
func (s *Service) ehrLaunch(ctx context.Context, a AuthRequest, m *session.Membership) (*session.Launch, *bus.Response, error) {
	res, refused, err := s.readLaunch(ctx, a)
	if refused != nil || err != nil {
		return nil, refused, err
	}
	var launch struct {
		Meta struct {
			Author fhir.Reference `json:"author"`
		} `json:"meta"`
		Patient     *fhir.Reference  `json:"patient"`
		Encounter   *fhir.Reference  `json:"encounter"`
		FHIRContext []fhir.Reference `json:"fhirContext"`
	}
	if err := json.Unmarshal(res.JSON, &launch); err != nil {
		return nil, nil, err
	}
	if res.Project != m.Project || launch.Meta.Author.Reference != m.Profile {
		return nil, a.invalidLaunch(), nil
	}
	// Used once: the first sign-in to present it spends it.
	if _, err := s.browsers.Create(ctx, "launch."+res.ID, []byte{1}); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, a.invalidLaunch(), nil
		}
		return nil, nil, err
	}
	out := &session.Launch{Patient: refID(launch.Patient, "Patient"), Encounter: refID(launch.Encounter, "Encounter"), Scope: scopeLaunch}
	for _, r := range launch.FHIRContext {
		if r.Reference != "" && len(out.FHIRContext) < 16 {
			out.FHIRContext = append(out.FHIRContext, r.Reference)
		}
	}
	return out, nil, nil
}

// refID is the id a reference names when it is of type typ, else "".
func refID(r *fhir.Reference, typ string) string {
	if r == nil {
		return ""
	}
	if t, id, ok := fhir.SplitReference(r.Reference); ok && t == typ {
		return id
	}
	return ""
}

// patientGate is the person's view of Patients through their own access
// policy (no scope narrows it: the picker lists what they may read).
func (s *Service) patientGate(ctx context.Context, bs *BrowserSession, membership string, m *session.Membership) (*access.Gate, error) {
	p := &bus.Principal{User: bs.User, Profile: m.Profile, Project: m.Project, Membership: membership,
		Admin: m.Admin, SuperAdmin: m.SuperAdmin, AccessPolicy: m.AccessPolicy}
	pol, err := s.policies.For(ctx, p)
	if err != nil {
		return nil, err
	}
	return pol.GateIn(s.repo, "Patient", repo.Scope{Project: m.Project}), nil
}

// pickerPage bounds the patients the picker lists at once.
const pickerPage = 20

// patientPage is the picker: a search by name and birth date, and the
// patients found that the person may read.
func (s *Service) patientPage(ctx context.Context, b web.Browser, a AuthRequest, membership string, gate *access.Gate, form url.Values) (*bus.Response, error) {
	name := strings.TrimSpace(form.Get("patient_name"))
	birth := strings.TrimSpace(form.Get("patient_birthdate"))
	params := url.Values{"_count": {strconv.Itoa(pickerPage)}, "_sort": {"family,given"}}
	if name != "" {
		params.Set("name", name)
	}
	if birth != "" {
		params.Set("birthdate", birth)
	}
	picker := &web.Picker{Name: name, BirthDate: birth}
	q, err := search.Parse("Patient", params)
	if err != nil {
		picker.Problem = fhir.AsError(err).Message()
	} else {
		page, err := gate.Search(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, res := range page.Resources {
			picker.Patients = append(picker.Patients, describePatient(res))
		}
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	resp, err := s.pages.Render(200, "patient", b, web.Data{Title: "Choose a patient", CSRF: csrf, App: clientName(a.client),
		Hidden: a.Values(), Membership: membership, Picker: picker})
	if resp != nil {
		resp.Header["Content-Security-Policy"] = AuthorizeCSP(a.target)
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}

// describePatient is a patient as the picker lists it.
func describePatient(res *repo.Resource) web.PatientChoice {
	var p struct {
		Name []struct {
			Text   string   `json:"text"`
			Given  []string `json:"given"`
			Family string   `json:"family"`
		} `json:"name"`
		BirthDate string `json:"birthDate"`
	}
	_ = json.Unmarshal(res.JSON, &p) // a stored Patient; a name missing shows its id
	name := ""
	if len(p.Name) > 0 {
		n := p.Name[0]
		name = cmp.Or(n.Text, strings.TrimSpace(strings.Join(append(n.Given, n.Family), " ")))
	}
	return web.PatientChoice{ID: res.ID, Name: cmp.Or(name, "Patient/"+res.ID), BirthDate: p.BirthDate}
}
