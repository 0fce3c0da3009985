package fhirsvc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// resourceResponse sends one resource with its version headers.
func resourceResponse(status int, res *repo.Resource) *bus.Response {
	resp := bus.FHIR(status, res.JSON)
	resp.Header["ETag"] = `W/"` + res.VersionID + `"`
	resp.Header["Last-Modified"] = res.LastUpdated.UTC().Format(http.TimeFormat)
	return resp
}

func (s *Service) read(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Read)
	if err != nil {
		return nil, err
	}
	res, err := g.Read(ctx, r.Param("id"))
	if err != nil {
		return nil, err
	}
	if g.Type() == "Binary" && wantsRaw(r.Get("Accept")) {
		return binaryContent(res)
	}
	if res, err = s.withSecret(ctx, r.Principal, g.Policy(), res); err != nil {
		return nil, err
	}
	if err := s.recordAccess(ctx, r, audit.PatientRead, []audit.Entity{{What: g.Type() + "/" + res.ID}}, []*repo.Resource{res}); err != nil {
		return nil, err
	}
	return resourceResponse(200, res), nil
}

// jobStatus is GET /fhir/R4/job/<id>/status: the AsyncJob, read as any
// read of it is (Medplum reads it with the caller's repository too).
func (s *Service) jobStatus(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	job := *r
	job.Params = map[string]string{"type": "AsyncJob", "id": r.Param("id")}
	return s.read(ctx, &job)
}

func (s *Service) vread(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.VRead)
	if err != nil {
		return nil, err
	}
	res, err := g.VRead(ctx, r.Param("id"), r.Param("vid"))
	if err != nil {
		return nil, err
	}
	if err := s.recordAccess(ctx, r, audit.PatientRead, []audit.Entity{{What: g.Type() + "/" + res.ID + "/_history/" + res.VersionID}}, []*repo.Resource{res}); err != nil {
		return nil, err
	}
	return resourceResponse(200, res), nil
}

func (s *Service) history(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.History)
	if err != nil {
		return nil, err
	}
	versions, err := g.History(ctx, r.Param("id"))
	if err != nil {
		return nil, err
	}
	out, err := historyBundle(s.cfg.BaseURL, g.Type(), r.Param("id"), versions, s.replyBudget())
	if err != nil {
		return nil, err
	}
	if err := s.recordAccess(ctx, r, audit.PatientRead, []audit.Entity{{What: g.Type() + "/" + r.Param("id"), Detail: "history"}}, versions); err != nil {
		return nil, err
	}
	return bus.FHIR(200, out), nil
}

// historyBundle is the history of typ/id as a Bundle: every version, in
// the store's order, a deleted one as a DELETE answered 410. A history
// larger than room bytes is refused (413) rather than cut.
func historyBundle(base, typ, id string, versions []*repo.Resource, room int) ([]byte, error) {
	total := len(versions)
	b := fhir.Bundle{ResourceType: "Bundle", Type: "history", Total: &total}
	for _, v := range versions {
		if room -= len(v.JSON) + 256; room < 0 {
			return nil, fhir.TooLarge(fmt.Sprintf("The history of %s/%s (%d versions) is too large to answer at once; read versions one at a time", typ, id, total))
		}
		e := fhir.BundleEntry{FullURL: base + "fhir/R4/" + typ + "/" + v.ID}
		e.Request = &struct {
			Method string `json:"method"`
			URL    string `json:"url"`
		}{Method: "PUT", URL: typ + "/" + v.ID}
		e.Response = &struct {
			Status       string `json:"status"`
			LastModified string `json:"lastModified,omitempty"`
		}{Status: "200", LastModified: v.LastUpdated.Format("2006-01-02T15:04:05.000Z")}
		if v.Deleted {
			e.Request.Method = "DELETE"
			e.Response.Status = "410"
		} else {
			e.Resource = v.JSON
		}
		b.Entry = append(b.Entry, e)
	}
	return b.Encode()
}

func (s *Service) search(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Search)
	if err != nil {
		return nil, err
	}
	params, err := searchParams(r)
	if err != nil {
		return nil, err
	}
	q, err := search.Parse(g.Type(), params)
	if err != nil {
		return nil, err
	}
	page, err := g.Search(ctx, q)
	if err != nil {
		return nil, err
	}
	for i, res := range page.Resources {
		if page.Resources[i], err = s.withSecret(ctx, r.Principal, g.Policy(), res); err != nil {
			return nil, err
		}
	}
	out, err := searchBundle(s.cfg.BaseURL, g.Type(), q, page, s.replyBudget())
	if err != nil {
		return nil, err
	}
	what := []audit.Entity{{Query: g.Type() + "?" + q.Canonical.Encode()}}
	if err := s.recordAccess(ctx, r, audit.PatientSearch, what, page.Resources); err != nil {
		return nil, err
	}
	return bus.FHIR(200, out), nil
}

// searchParams are a search's parameters: the query, and for POST _search
// a form body too (its values first, then the URL's).
func searchParams(r *bus.Request) (url.Values, error) {
	if r.Method != "POST" {
		return r.Query, nil
	}
	if !isMediaType(r.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return nil, fhir.UnsupportedMediaType()
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil {
		return nil, fhir.BadRequest("Invalid form body")
	}
	for k, v := range r.Query {
		form[k] = append(form[k], v...)
	}
	return form, nil
}

// searchBundle is one page of a search as a searchset Bundle, with its self
// link and, when more follow, a next link.
func searchBundle(base, typ string, q *search.Query, page *repo.Page, room int) ([]byte, error) {
	b := fhir.Bundle{ResourceType: "Bundle", Type: "searchset"}
	if page.Total >= 0 {
		t := page.Total
		b.Total = &t
	}
	self := base + "fhir/R4/" + typ
	if enc := q.Canonical.Encode(); enc != "" {
		self += "?" + enc
	}
	b.Link = append(b.Link, fhir.BundleLink{Relation: "self", URL: self})
	// A page is cut short where it would no longer fit in room bytes; its
	// next link continues from there.
	more, returned := page.More, len(page.Resources)
	for i, res := range page.Resources {
		body := res.JSON
		if len(q.Elements) > 0 || q.Summary == "text" || q.Summary == "data" {
			var err error
			if body, err = subset(body, q); err != nil {
				return nil, err
			}
		}
		if room -= len(body) + 256; room < 0 {
			if i == 0 {
				return nil, fhir.TooLarge(typ + "/" + res.ID + " is too large to answer in a search; read it by id")
			}
			more, returned = true, i
			break
		}
		e := fhir.BundleEntry{FullURL: base + "fhir/R4/" + typ + "/" + res.ID, Resource: body}
		e.Search = &struct {
			Mode string `json:"mode"`
		}{Mode: "match"}
		b.Entry = append(b.Entry, e)
	}
	if more {
		next := url.Values{}
		for k, v := range q.Canonical {
			next[k] = v
		}
		next.Set("_offset", strconv.Itoa(q.Offset+returned))
		next.Set("_count", strconv.Itoa(q.Count))
		b.Link = append(b.Link, fhir.BundleLink{Relation: "next", URL: base + "fhir/R4/" + typ + "?" + next.Encode()})
	}
	return b.Encode()
}

// subset applies _elements and _summary=text|data to one resource.
func subset(body []byte, q *search.Query) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	keep := func(k string) bool {
		switch k {
		case "resourceType", "id", "meta":
			return true
		}
		if q.Summary == "text" {
			return k == "text"
		}
		if q.Summary == "data" {
			return k != "text"
		}
		for _, e := range q.Elements {
			if e == k {
				return true
			}
		}
		return false
	}
	for k := range m {
		if !keep(k) {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}

// isMediaType compares a Content-Type header's media type, ignoring parameters.
func isMediaType(header string, want ...string) bool {
	mt, _, err := mime.ParseMediaType(header)
	if err != nil {
		return false
	}
	for _, w := range want {
		if mt == w {
			return true
		}
	}
	return false
}

// decodeBody reads a resource of type typ from a JSON body, with the meta
// fields only the server sets removed.
func decodeBody(r *bus.Request, typ string) (map[string]any, error) {
	res, _, err := decodeBodyProject(r, typ)
	return res, err
}

// decodeBodyProject is decodeBody that also returns the meta.project sent,
// which only a super admin's create may use.
func decodeBodyProject(r *bus.Request, typ string) (map[string]any, string, error) {
	if !isMediaType(r.Get("Content-Type"), "application/fhir+json", "application/json") {
		return nil, "", fhir.UnsupportedMediaType()
	}
	res, err := fhir.Decode(r.Body)
	if err != nil {
		return nil, "", err
	}
	if rt, _ := res["resourceType"].(string); rt != typ {
		return nil, "", fhir.BadRequest("Incorrect resource type", "resourceType")
	}
	project := ""
	// meta.project and friends are the server's to set; a forged value is dropped.
	if meta, ok := res["meta"].(map[string]any); ok {
		project, _ = meta["project"].(string)
		for _, k := range []string{"versionId", "lastUpdated", "project", "author", "account", "compartment"} {
			delete(meta, k)
		}
		if len(meta) == 0 {
			delete(res, "meta")
		}
	}
	return res, project, nil
}

// strict reports whether the caller's project validates strictly.
func (s *Service) strict(ctx context.Context, project string) bool {
	if project == "" {
		return true
	}
	p, err := s.repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		return true
	}
	// Decoded once per version of the Project: every write asks, and the
	// Project (with its secrets and settings) cost more to decode than the
	// rest of a create's checks.
	strict, _ := repo.Memo(p, "fhir.strict", projectStrict)
	return strict
}

// projectStrict reads a Project's strictMode: strict unless it says false
// (an unreadable Project is strict too).
func projectStrict(b []byte) (bool, error) {
	var v struct {
		StrictMode *bool `json:"strictMode"`
	}
	_ = json.Unmarshal(b, &v)
	return v.StrictMode == nil || *v.StrictMode, nil
}

func (s *Service) create(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Create)
	if err != nil {
		return nil, err
	}
	typ := g.Type()
	// The server names new resources. A transaction names its creates in
	// advance (no HTTP route carries an id on a create), so that it can undo
	// a create whose outcome its deadline cut off.
	id := r.Param("id")
	if id == "" {
		id = repo.NewID()
	}
	opts := repo.WriteOptions{ID: id, Author: r.Principal.Profile, Strict: s.strict(ctx, g.Project())}
	in, err := decodeCreate(r, typ, id)
	if err != nil {
		return nil, err
	}
	if p := in.project; p != "" {
		if _, err := s.repo.Read(ctx, repo.AllProjects, "Project", p); fhir.Missing(err) {
			return nil, fhir.BadRequest("Project "+p+" does not exist", "meta.project")
		} else if err != nil {
			return nil, err
		}
		opts.Project, opts.Strict = p, s.strict(ctx, p)
	}
	if cond := r.Get("If-None-Exist"); cond != "" {
		// Conditional create: the same query answers the same resource.
		defer s.conditions.lock(conditionKey(g.Project(), typ, cond))()
		found, err := match(ctx, g, cond)
		if err != nil {
			return nil, err
		}
		if found != nil {
			return resourceResponse(200, found), nil
		}
	}
	out, err := g.Create(ctx, in.res, opts)
	if err != nil {
		return nil, err
	}
	if in.raw {
		// The uploader has the content; as in Medplum the answer describes
		// it without repeating it (base64 would make it a third larger
		// than the upload, and too large to answer near the body limit).
		if out, err = withoutData(out); err != nil {
			return nil, err
		}
	}
	resp := resourceResponse(201, out)
	resp.Header["Location"] = s.cfg.BaseURL + "fhir/R4/" + typ + "/" + out.ID + "/_history/" + out.VersionID
	return s.afterWrite(ctx, r, resp, out)
}

// createInput is a create's body as the repository takes it.
type createInput struct {
	res map[string]any
	// raw marks a raw Binary upload, answered without its content.
	raw bool
	// project is where a super admin's meta.project places the resource
	// ("": the caller's project).
	project string
}

// decodeCreate reads a create's body: for a Binary sent as anything but
// JSON, a raw upload (Medplum's createBinary) whose body is the content;
// else a resource of typ. The id is the server's to give. As in Medplum,
// a super admin may place a resource in any project with meta.project,
// except a Project; anyone else's is dropped.
func decodeCreate(r *bus.Request, typ, id string) (createInput, error) {
	if typ == "Binary" && !isMediaType(r.Get("Content-Type"), "application/fhir+json", "application/json") {
		return createInput{res: rawBinary(r, id), raw: true}, nil
	}
	res, project, err := decodeBodyProject(r, typ)
	if err != nil {
		return createInput{}, err
	}
	delete(res, "id")
	if r.Principal == nil || !r.Principal.SuperAdmin || typ == "Project" {
		project = ""
	}
	return createInput{res: res, project: project}, nil
}

// ifMatch reads the version from an If-Match header (W/"v" or "v" or v).
func ifMatch(h string) string {
	h = strings.TrimPrefix(strings.TrimSpace(h), "W/")
	return strings.Trim(h, `"`)
}

// checkVersion refuses (412) a write whose If-Match names a version other
// than the current one; without If-Match any version will do.
func checkVersion(header, current string) error {
	if v := ifMatch(header); v != "" && v != current {
		return fhir.PreconditionFailed()
	}
	return nil
}

// checkIdentity refuses a resource that is not typ/id: an update may not
// change its id, nor a patch its type or id.
func checkIdentity(res map[string]any, typ, id string) error {
	if rt, _ := res["resourceType"].(string); rt != typ {
		return fhir.BadRequest("Incorrect resource type", "resourceType")
	}
	if got, _ := res["id"].(string); got != id {
		return fhir.BadRequest("Incorrect ID", "id")
	}
	return nil
}

func (s *Service) update(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Update)
	if err != nil {
		return nil, err
	}
	res, err := decodeBody(r, g.Type())
	if err != nil {
		return nil, err
	}
	if r.Param("id") == "" {
		return s.conditionalUpdate(ctx, r, g, res)
	}
	if err := checkIdentity(res, g.Type(), r.Param("id")); err != nil {
		return nil, err
	}
	if g.Type() == "ClientApplication" {
		s.dropShownSecret(ctx, r.Param("id"), res)
	}
	out, err := g.Update(ctx, access.Update, res, repo.WriteOptions{
		IfMatch: ifMatch(r.Get("If-Match")), Author: r.Principal.Profile, Strict: s.strict(ctx, g.Project()),
	})
	if err != nil {
		return nil, err
	}
	return s.afterWrite(ctx, r, resourceResponse(200, out), out)
}

func (s *Service) patch(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Patch)
	if err != nil {
		return nil, err
	}
	if !isMediaType(r.Get("Content-Type"), "application/json-patch+json") {
		return nil, fhir.UnsupportedMediaType()
	}
	ops, err := fhir.ParsePatch(r.Body)
	if err != nil {
		return nil, err
	}
	// The patch applies to the resource as the caller sees it: a test or
	// copy cannot reach a hidden field, which the update puts back.
	cur, err := g.Current(ctx, access.Patch, r.Param("id"))
	if err != nil {
		return nil, err
	}
	if err := checkVersion(r.Get("If-Match"), cur.VersionID); err != nil {
		return nil, err
	}
	patched, err := fhir.ApplyPatch(ops, cur.JSON)
	if err != nil {
		return nil, err
	}
	res, err := fhir.Decode(patched)
	if err != nil {
		return nil, err
	}
	if err := checkIdentity(res, g.Type(), cur.ID); err != nil {
		return nil, err
	}
	// The version read above is the one patched: a concurrent write is a conflict, not a lost update.
	out, err := g.Update(ctx, access.Patch, res, repo.WriteOptions{IfMatch: cur.VersionID, Author: r.Principal.Profile, Strict: s.strict(ctx, g.Project())})
	if err != nil {
		return nil, err
	}
	return s.afterWrite(ctx, r, resourceResponse(200, out), out)
}

func (s *Service) delete(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	g, err := s.target(ctx, r, access.Delete)
	if err != nil {
		return nil, err
	}
	typ := g.Type()
	cur, err := g.Current(ctx, access.Delete, r.Param("id"))
	if err != nil {
		return nil, err
	}
	if profileTypes[typ] {
		// Deleting a member's profile would break their sign-in for good
		// (Medplum only logs a warning); refuse and say what to do.
		mid, err := s.memberOf(ctx, cur.Project, typ+"/"+cur.ID)
		if err != nil {
			return nil, err
		}
		if err := profileInUse(mid); err != nil {
			return nil, err
		}
	}
	if err := g.Delete(ctx, r.Param("id")); err != nil {
		if errors.Is(err, fhir.ErrGone) {
			return nil, fhir.Gone()
		}
		return nil, err
	}
	return s.afterDelete(ctx, r, bus.OK(), cur.Project, typ, cur.ID)
}

// profileTypes are the types a membership's profile may be.
var profileTypes = map[string]bool{"Patient": true, "Practitioner": true, "RelatedPerson": true}

// profileInUse refuses (409) the delete of a profile that membership (an
// id, "" for none) signs in with.
func profileInUse(membership string) error {
	if membership == "" {
		return nil
	}
	return fhir.Conflict("Resource is the profile of ProjectMembership/" + membership + "; remove the member first")
}

// rawBinary makes a Binary of a raw upload: the request's content type and
// body, and the url Medplum's createAttachment links to.
func rawBinary(r *bus.Request, id string) map[string]any {
	ct := r.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	b := map[string]any{
		"resourceType": "Binary", "contentType": ct,
		"data": base64.StdEncoding.EncodeToString(r.Body), "url": "Binary/" + id,
	}
	if sc := r.Get("X-Security-Context"); sc != "" {
		b["securityContext"] = map[string]any{"reference": sc}
	}
	return b
}

// withoutData is a Binary without its content.
func withoutData(res *repo.Resource) (*repo.Resource, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(res.JSON, &m); err != nil {
		return nil, err
	}
	delete(m, "data")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return res.WithJSON(b), nil
}

// wantsRaw reports whether a client asked for a Binary's content rather
// than its FHIR JSON (Medplum's download sends Accept: */*).
func wantsRaw(accept string) bool {
	return accept != "" && !strings.Contains(accept, "json")
}

// binaryContent answers a Binary with its content and content type.
func binaryContent(res *repo.Resource) (*bus.Response, error) {
	var b struct {
		ContentType string `json:"contentType"`
		Data        string `json:"data"`
	}
	if err := json.Unmarshal(res.JSON, &b); err != nil {
		return nil, err
	}
	data, err := base64.StdEncoding.DecodeString(b.Data)
	if err != nil {
		return nil, fhir.BadRequest("Binary data is not valid base64")
	}
	return &bus.Response{Status: 200, Header: map[string]string{"Content-Type": b.ContentType, "ETag": `W/"` + res.VersionID + `"`}, Body: data}, nil
}
