package fhirsvc

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/terminology"
)

// expandValueSet answers GET ValueSet/$expand (url, filter, count, offset)
// from the value sets compiled from the official definitions; any signed-in
// caller may ask, as the base definitions are public in Medplum too.
func (s *Service) expandValueSet(_ context.Context, r *bus.Request) (*bus.Response, error) {
	e, err := terminology.Expand(r.Query, time.Now())
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, body), nil
}

// validateValueSetCode answers GET ValueSet/$validate-code (url, system,
// code, display) from the same table.
func (s *Service) validateValueSetCode(_ context.Context, r *bus.Request) (*bus.Response, error) {
	p, err := terminology.ValidateCode(r.Query)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, body), nil
}

// lookupInput is what CodeSystem/$lookup was asked: the query of a GET,
// the Parameters body of a POST.
type lookupInput struct {
	System, Code, Version string
	Coding                *coding
}

type coding struct {
	System string `json:"system"`
	Code   string `json:"code"`
}

// parseLookup reads a $lookup request's parameters, refusing a body that
// is not a Parameters resource and a parameter given twice.
func parseLookup(r *bus.Request) (lookupInput, error) {
	var in lookupInput
	if r.Method != "POST" {
		for _, name := range []string{"system", "code", "version"} {
			if len(r.Query[name]) > 1 {
				return in, fhir.BadRequest("Parameter "+name+" is given more than once", name)
			}
		}
		in.System, in.Code, in.Version = r.Query.Get("system"), r.Query.Get("code"), r.Query.Get("version")
		return in, nil
	}
	if !r.IsJSON() {
		return in, fhir.UnsupportedMediaType()
	}
	var body struct {
		ResourceType string `json:"resourceType"`
		Parameter    []struct {
			Name        string  `json:"name"`
			ValueURI    string  `json:"valueUri"`
			ValueCode   string  `json:"valueCode"`
			ValueString string  `json:"valueString"`
			ValueCoding *coding `json:"valueCoding"`
		} `json:"parameter"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.ResourceType != "Parameters" {
		return in, fhir.BadRequest("The body of $lookup must be a Parameters resource")
	}
	seen := map[string]bool{}
	for _, p := range body.Parameter {
		if seen[p.Name] {
			return in, fhir.BadRequest("Parameter "+p.Name+" is given more than once", p.Name)
		}
		seen[p.Name] = true
		switch p.Name {
		case "system":
			in.System = p.ValueURI
		case "code":
			in.Code = p.ValueCode
		case "version":
			in.Version = p.ValueString
		case "coding":
			in.Coding = p.ValueCoding
		}
	}
	return in, nil
}

// lookupCode answers CodeSystem/$lookup (GET and POST; of a system by url,
// or of a stored CodeSystem by id) as Medplum does: the system's name, the
// code's display and its properties. No system is 400, an unknown one 400
// "CodeSystem <url> not found", a code the system lacks 404.
func (s *Service) lookupCode(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	in, err := parseLookup(r)
	if err != nil {
		return nil, err
	}
	code, system := in.Code, in.System
	if in.Coding != nil {
		code, system = in.Coding.Code, in.Coding.System
	}
	var cs *terminology.CodeSystem
	switch {
	case r.Param("id") != "":
		cs, err = s.storedCodeSystem(ctx, r, r.Param("id"))
	case system != "":
		cs, err = s.codeSystemOf(ctx, r, system, in.Version)
	default:
		err = fhir.BadRequest("No code system specified")
	}
	if err != nil {
		return nil, err
	}
	switch {
	case in.Coding != nil && code == "":
		return nil, fhir.BadRequest("No code specified")
	case code == "":
		return nil, fhir.BadRequest("No coding specified")
	case system != "" && system != cs.URL:
		return nil, fhir.NotFound()
	}
	p, err := cs.Lookup(code)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, body), nil
}

// codeSystemRequest is r aimed at CodeSystem/id, for the access check.
func codeSystemRequest(r *bus.Request, id string) *bus.Request {
	cr := *r
	cr.Params = map[string]string{"type": "CodeSystem", "id": id}
	return &cr
}

// storedCodeSystem is the project's CodeSystem id, read as a read of it is.
func (s *Service) storedCodeSystem(ctx context.Context, r *bus.Request, id string) (*terminology.CodeSystem, error) {
	g, err := s.target(ctx, codeSystemRequest(r, id), access.Read)
	if err != nil {
		return nil, err
	}
	res, err := g.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return terminology.StoredCodeSystem(res.JSON)
}

// codeSystemOf is the code system of a url (and version, when given): the
// project's own CodeSystem, found as a search finds it, else the table's,
// as Medplum prefers a project's code system to the base one.
func (s *Service) codeSystemOf(ctx context.Context, r *bus.Request, system, version string) (*terminology.CodeSystem, error) {
	g, err := s.target(ctx, codeSystemRequest(r, ""), access.Search)
	if err != nil {
		return nil, err
	}
	q := url.Values{"url": {system}, "_count": {"1"}}
	if version != "" {
		q.Set("version", version)
	}
	sq, err := search.Parse("CodeSystem", q)
	if err != nil {
		return nil, err
	}
	page, err := g.Search(ctx, sq)
	if err != nil {
		return nil, err
	}
	if len(page.Resources) > 0 {
		return terminology.StoredCodeSystem(page.Resources[0].JSON)
	}
	if cs := terminology.BuiltinCodeSystem(system); cs != nil {
		return cs, nil
	}
	return nil, fhir.BadRequest("CodeSystem " + system + " not found")
}
