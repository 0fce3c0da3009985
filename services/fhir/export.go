package fhirsvc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/inprogress"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store"
)

// Bulk Data export, the $export operation of the FHIR Bulk Data Access IG
// as Medplum serves it: a kick-off answers 202 at once with a status URL
// (/fhir/R4/bulkdata/export/<job>), and the export runs in the background
// as durable work. Its AsyncJob records progress; the files are Binaries of
// NDJSON, one or more per resource type, each small enough to download in
// one answer. See docs/decisions/api.md, "Bulk export".

const (
	jobsStream     = "PINION_JOBS"
	exportSubject  = "pinion.jobs.export"
	exportConsumer = "fhir-export"
	// exportAckWait is how long a job may go without a heartbeat before
	// another instance takes it over (after a crash).
	exportAckWait = 30 * time.Second
	// exportAttempts bounds how often a job is started: a job that keeps
	// taking its process down is failed, not retried for ever.
	exportAttempts = 3
	// exportMaxTime bounds one attempt.
	exportMaxTime = 6 * time.Hour
	// exportPage is how many resources one read of the store brings.
	exportPage = 500
	// exportFileBytes caps one NDJSON file; a smaller bus makes it smaller
	// still (fileBytes), so that a file downloads in one answer.
	exportFileBytes = 4 << 20
	// maxActiveExports bounds the unfinished exports of one project.
	maxActiveExports = 2
	// maxGroupPatients bounds the patients of a Group export.
	maxGroupPatients = 1000
	ndjsonType       = "application/fhir+ndjson"
)

// notExportedTypes are, beside the administrative types (access), the
// types no export writes: binaries, Pinion's own records and conformance
// resources (as Medplum), and the credentials' neighbours. AuditEvents are
// exported (unlike Medplum): the audit trail goes to an archive or a SIEM
// this way too, for whoever may read it (an admin, or a policy naming it).
var notExportedTypes = map[string]bool{
	"Binary": true, "AsyncJob": true, "BulkDataExport": true,
	"CodeSystem": true, "SearchParameter": true, "StructureDefinition": true, "ValueSet": true,
	"ClientApplication": true, "PasswordChangeRequest": true,
}

// notExported reports whether an export leaves typ out.
func notExported(typ string) bool { return notExportedTypes[typ] || access.Administrative(typ) }

// exportSpec is what a job needs to run, stored durably with it.
type exportSpec struct {
	Job       string        `json:"job"`
	Project   string        `json:"project"`
	Principal bus.Principal `json:"principal"`
	Types     []string      `json:"types"`
	Since     string        `json:"since,omitempty"`
	// Patients are a Group export's members: each type is confined to
	// resources about them.
	Patients []string `json:"patients,omitempty"`
	Group    bool     `json:"group,omitempty"`
	// Remote is the requester's address, for the audit trail.
	Remote string `json:"remote,omitempty"`
}

// export is the kick-off: POST or GET /fhir/R4/$export, Patient/$export and
// Group/<id>/$export, with _type, _since and _outputFormat.
func (s *Service) export(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil {
		return nil, fhir.Unauthorized()
	}
	params, err := exportParams(r)
	if err != nil {
		return nil, err
	}
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	// The job is an AsyncJob and its files Binaries: a caller who could
	// not read them could start an export but never see it.
	for _, t := range []string{"AsyncJob", "Binary"} {
		if pol.AllowResource(t, "", access.Read) != nil {
			return nil, fhir.ForbiddenText("An export needs read access to " + t + ", which your access policy does not give")
		}
	}
	spec := &exportSpec{Project: r.Principal.Project, Principal: *r.Principal, Remote: r.Remote}
	if spec.Since, err = exportSince(params.Get("_since")); err != nil {
		return nil, err
	}
	if err := checkOutputFormat(params.Get("_outputFormat")); err != nil {
		return nil, err
	}
	level := exportLevel(r.Path)
	switch level {
	case "Group":
		spec.Group = true
		if spec.Patients, err = s.groupPatients(ctx, pol, r.Param("id")); err != nil {
			return nil, err
		}
	case "Patient":
		if err := pol.Allow("Patient", access.Search); err != nil {
			return nil, err
		}
	}
	candidates := exportCandidates(level)
	if v := params.Get("_type"); v != "" {
		if candidates, err = askedTypes(v, candidates); err != nil {
			return nil, err
		}
	}
	spec.Types = exportTypes(candidates, spec, func(t string) bool { return pol.AllowResource(t, "", access.Search) == nil })
	if err := s.checkActiveExports(ctx, spec.Project); err != nil {
		return nil, err
	}
	// The job, like its files, is kept for its requester (and the
	// project's admins): its manifest lists them.
	body := newExportJob(s.cfg.BaseURL, r.Path, r.RawQuery, time.Now())
	if body.Meta, err = json.Marshal(ownedMeta(r.Principal.Profile)); err != nil {
		return nil, err
	}
	m, err := resource.Map(body)
	if err != nil {
		return nil, err
	}
	job, err := s.repo.Create(ctx, repo.Scope{Project: spec.Project}, m, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	spec.Job = job.ID
	data, _ := json.Marshal(spec)
	if _, err := s.js.Publish(ctx, exportSubject, data, jetstream.WithMsgID(job.ID)); err != nil {
		s.failExport(context.WithoutCancel(ctx), spec, fmt.Errorf("not queued: %w", err))
		return nil, fmt.Errorf("queue export: %w", err)
	}
	s.log.Info("export accepted", "job", job.ID, "project", spec.Project, "types", len(spec.Types), "level", level)
	return exportAccepted(s.cfg.BaseURL, job.ID), nil
}

// exportSince reads _since: an instant, kept in UTC ("" when not given).
func exportSince(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return "", fhir.BadRequest("Invalid _since: want an instant such as 2024-01-02T03:04:05Z", "_since")
	}
	return t.UTC().Format(time.RFC3339Nano), nil
}

// checkOutputFormat accepts NDJSON, under any of the names the Bulk Data
// IG gives it, and nothing else.
func checkOutputFormat(f string) error {
	switch f {
	case "", ndjsonType, "application/ndjson", "ndjson":
		return nil
	}
	return fhir.BadRequest("Unsupported _outputFormat: "+f+" (only "+ndjsonType+")", "_outputFormat")
}

// exportCandidates are the types an export at level may cover.
func exportCandidates(level string) []string {
	if level == "System" {
		return fhirschema.ResourceTypes()
	}
	return patientTypes()
}

// askedTypes reads _type (comma-separated): each a known type the level
// covers, kept once, in the order asked.
func askedTypes(v string, candidates []string) ([]string, error) {
	var asked []string
	for _, t := range strings.Split(v, ",") {
		t = strings.TrimSpace(t)
		switch {
		case !fhirschema.IsResourceType(t):
			return nil, fhir.BadRequest("Unknown resource type: "+t, "_type")
		case notExported(t) || !slices.Contains(candidates, t):
			return nil, fhir.BadRequest(t+" cannot be exported at this level", "_type")
		}
		if !slices.Contains(asked, t) {
			asked = append(asked, t)
		}
	}
	return asked, nil
}

// exportTypes are the candidates an export writes. As in Medplum, the
// types the caller may not search are left out; a group without patients
// exports nothing.
func exportTypes(candidates []string, spec *exportSpec, searchable func(typ string) bool) []string {
	if spec.Group && len(spec.Patients) == 0 {
		return nil
	}
	var out []string
	for _, t := range candidates {
		if !notExported(t) && searchable(t) {
			out = append(out, t)
		}
	}
	return out
}

// newExportJob is the AsyncJob that records an export requested at path
// (with its query) at now.
func newExportJob(base, path, rawQuery string, now time.Time) *resource.AsyncJob {
	return &resource.AsyncJob{
		ResourceType: "AsyncJob", Status: "active",
		RequestTime: now.UTC().Format(time.RFC3339Nano),
		Request:     base + strings.TrimPrefix(path, "/") + querySuffix(rawQuery),
	}
}

// ownedMeta is the meta of an export's job and files: kept for the
// requester's profile (access.OwnerTag), so that no other member but the
// project's admins reads or finds them.
func ownedMeta(profile string) map[string]any {
	return map[string]any{"security": []any{access.OwnerTag(profile)}}
}

// exportBinary is one NDJSON file of an export, kept for its requester:
// Binary.securityContext names the requester, as Medplum's export sets
// it, and the owner tag enforces it.
func exportBinary(profile string, ndjson []byte) map[string]any {
	bin := map[string]any{
		"resourceType": "Binary", "contentType": ndjsonType,
		"data": base64.StdEncoding.EncodeToString(ndjson),
		"meta": ownedMeta(profile),
	}
	if profile != "" {
		bin["securityContext"] = map[string]any{"reference": profile}
	}
	return bin
}

// exportAccepted answers a kick-off: 202, the status URL in
// Content-Location and, as Medplum, in the outcome's diagnostics.
func exportAccepted(base, job string) *bus.Response {
	return bus.Accepted(base + "fhir/R4/bulkdata/export/" + job)
}

// exportParams are the kick-off's parameters: the query, and for a POST
// with a Parameters body its valueString/valueInstant/valueCode parts. Any
// other parameter is refused rather than ignored, so a caller never
// believes a filter was applied.
func exportParams(r *bus.Request) (url.Values, error) {
	params := url.Values{}
	for k, v := range r.Query {
		params[k] = append(params[k], v...)
	}
	if r.Method == "POST" && len(bytes.TrimSpace(r.Body)) > 0 {
		if !r.IsJSON() {
			return nil, fhir.UnsupportedMediaType()
		}
		var body struct {
			ResourceType string `json:"resourceType"`
			Parameter    []struct {
				Name         string `json:"name"`
				ValueString  string `json:"valueString"`
				ValueInstant string `json:"valueInstant"`
				ValueCode    string `json:"valueCode"`
			} `json:"parameter"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.ResourceType != "Parameters" {
			return nil, fhir.BadRequest("The body of $export must be a Parameters resource")
		}
		for _, p := range body.Parameter {
			params.Add(p.Name, p.ValueString+p.ValueInstant+p.ValueCode)
		}
	}
	for k, v := range params {
		switch k {
		case "_type":
			params[k] = []string{strings.Join(v, ",")}
		case "_since", "_outputFormat":
			if len(v) > 1 {
				return nil, fhir.BadRequest("Give "+k+" once", k)
			}
		case "_format", "_pretty":
		default:
			return nil, fhir.BadRequest("Unsupported export parameter: "+k, k)
		}
	}
	return params, nil
}

// exportLevel is System, Patient or Group, from the path.
func exportLevel(path string) string {
	switch {
	case strings.HasPrefix(path, "/fhir/R4/Group/"):
		return "Group"
	case strings.HasPrefix(path, "/fhir/R4/Patient/"):
		return "Patient"
	}
	return "System"
}

// patientTypes are Patient and the types with a patient search parameter
// that can point at a Patient: what a patient-level export covers.
func patientTypes() []string {
	out := []string{"Patient"}
	for _, t := range fhirschema.ResourceTypes() {
		// The trail's events about a patient are the trail's, not part of
		// the patient's record: a system export carries them.
		if t == "Patient" || t == "AuditEvent" || notExported(t) {
			continue
		}
		for _, p := range search.Params(t) {
			if p.Code == "patient" && p.Type == "reference" && (len(p.Targets) == 0 || slices.Contains(p.Targets, "Patient")) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// groupPatients reads the Group as the caller and returns its Patient
// members.
func (s *Service) groupPatients(ctx context.Context, pol *access.Policy, id string) ([]string, error) {
	if err := pol.AllowResource("Group", id, access.Read); err != nil {
		return nil, err
	}
	g := pol.Gate(s.repo, "Group", id)
	res, err := g.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return groupMembers(res.JSON)
}

// groupMembers are a Group's Patient members, each once, in the order
// listed; other members are left out. A group of more than
// maxGroupPatients patients is refused.
func groupMembers(group []byte) ([]string, error) {
	var g struct {
		Member []struct {
			Entity fhir.Reference `json:"entity"`
		} `json:"member"`
	}
	if err := json.Unmarshal(group, &g); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range g.Member {
		if t, pid, ok := fhir.SplitReference(m.Entity.Reference); ok && t == "Patient" && !slices.Contains(out, pid) {
			out = append(out, pid)
		}
	}
	if len(out) > maxGroupPatients {
		return nil, fhir.BadRequest(fmt.Sprintf("The group has %d patients; a group export takes at most %d (export Patient/$export instead)", len(out), maxGroupPatients))
	}
	return out, nil
}

// checkActiveExports refuses a project's export beyond maxActiveExports
// unfinished ones.
func (s *Service) checkActiveExports(ctx context.Context, project string) error {
	q, err := search.Parse("AsyncJob", url.Values{"status": {"active"}, "_summary": {"count"}})
	if err != nil {
		return err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "AsyncJob", q)
	if err != nil {
		return err
	}
	return activeExportsLimit(page.Total)
}

// activeExportsLimit refuses (429) a project's export while it has
// maxActiveExports unfinished ones.
func activeExportsLimit(active int) error {
	if active < maxActiveExports {
		return nil
	}
	e := fhir.TooManyRequests()
	e.Outcome.Issue[0].Details.Text = fmt.Sprintf("This project has %d exports running; wait for one to finish", active)
	return e
}

// querySuffix is a request's query as it follows the path: "?" and the
// query, or "" for none.
func querySuffix(raw string) string {
	if raw == "" {
		return ""
	}
	return "?" + raw
}

// exportFile is one NDJSON file of a job's output.
type exportFile struct {
	Type  string `json:"type"`
	URL   string `json:"url"` // Binary/<id>
	Count int    `json:"count"`
}

// exportState is a job's progress, kept in its AsyncJob: the files written
// and where the walk stands (the step, a type, and the last id written).
type exportState struct {
	Files []exportFile
	Step  int
	After string
}

// stateOf reads a job's progress from its output Parameters.
func stateOf(job *resource.AsyncJob) exportState {
	var st exportState
	if job.Output == nil {
		return st
	}
	for _, p := range job.Output.Parameter {
		parts := map[string]*resource.Parameter{}
		for i := range p.Part {
			parts[p.Part[i].Name] = &p.Part[i]
		}
		str := func(k string) string {
			if v := parts[k]; v != nil {
				return v.Text()
			}
			return ""
		}
		num := func(k string) int {
			if v := parts[k]; v != nil {
				return v.Int()
			}
			return 0
		}
		switch p.Name {
		case "output":
			st.Files = append(st.Files, exportFile{Type: str("type"), URL: str("url"), Count: num("count")})
		case "cursor":
			st.Step, st.After = num("step"), str("after")
		}
	}
	return st
}

// resources counts the resources in the files written so far.
func (st exportState) resources() int {
	n := 0
	for _, f := range st.Files {
		n += f.Count
	}
	return n
}

// advance is the state once the walk stands at step, after the id after;
// its files are a copy, so that a write that fails leaves st as it was.
func (st exportState) advance(step int, after string) exportState {
	next := st
	next.Files = slices.Clone(st.Files)
	next.Step, next.After = step, after
	return next
}

// output is the job's output Parameters for a state; done drops the cursor.
func (st exportState) output(done bool) *resource.Parameters {
	params := make([]resource.Parameter, 0, len(st.Files)+1)
	for _, f := range st.Files {
		params = append(params, resource.Parameter{Name: "output", Part: []resource.Parameter{
			{Name: "type", ValueCode: f.Type},
			{Name: "url", ValueURI: f.URL},
			{Name: "count", ValueInteger: resource.IntegerOf(f.Count)},
		}})
	}
	if !done {
		cursor := []resource.Parameter{{Name: "step", ValueInteger: resource.IntegerOf(st.Step)}}
		if st.After != "" {
			cursor = append(cursor, resource.Parameter{Name: "after", ValueString: st.After})
		}
		params = append(params, resource.Parameter{Name: "cursor", Part: cursor})
	}
	return &resource.Parameters{ResourceType: "Parameters", Parameter: params}
}

// changed reports a write refused because the job changed since it was
// read (a stale If-Match, or a write that raced ours: both 412).
func changed(err error) bool { return errors.Is(err, fhir.ErrPreconditionFailed) }

// errCancelled stops a job whose AsyncJob changed under it: cancelled.
var errCancelled = errors.New("export cancelled")

// startExports creates the job stream and takes export jobs, one at a time
// per deployment: an export is background work and must not crowd out
// requests.
func (s *Service) startExports(ctx context.Context) error {
	if _, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: jobsStream, Subjects: []string{"pinion.jobs.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		Duplicates: time.Hour, MaxAge: 7 * 24 * time.Hour,
	}); err != nil {
		return fmt.Errorf("stream %s: %w", jobsStream, err)
	}
	c, err := s.js.CreateOrUpdateConsumer(ctx, jobsStream, jetstream.ConsumerConfig{
		Durable: exportConsumer, FilterSubject: exportSubject,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: exportAckWait,
		MaxAckPending: 1,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", exportConsumer, err)
	}
	// Stopping the service stops the job in hand too: it is delivered
	// again, and resumes, wherever an instance runs next.
	jobs, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cc, err := c.Consume(func(m jetstream.Msg) { go s.runExport(jobs, m) }, jetstream.PullMaxMessages(1))
	if err != nil {
		cancel()
		return fmt.Errorf("consume %s: %w", exportConsumer, err)
	}
	s.stopExports = func() {
		cc.Stop()
		cancel()
	}
	return nil
}

// runExport runs one delivery of a job, keeping it claimed with heartbeats
// while it works. A job found finished is dropped; a job delivered again
// after a crash resumes from its last file; one that has been started
// exportAttempts times is failed.
func (s *Service) runExport(jobs context.Context, m jetstream.Msg) {
	ctx, cancel := context.WithTimeout(jobs, exportMaxTime)
	defer cancel()
	var spec exportSpec
	if err := json.Unmarshal(m.Data(), &spec); err != nil || spec.Job == "" {
		s.log.Error("export job unreadable; dropped", "err", err)
		_ = m.Term()
		return
	}
	defer inprogress.Keep(m, exportAckWait/3)()
	attempt := uint64(1)
	if md, err := m.Metadata(); err == nil {
		attempt = md.NumDelivered
	}
	log := s.log.With("job", spec.Job, "project", spec.Project)
	err := s.runExportJob(ctx, &spec, attempt, log)
	switch exportOutcome(jobs.Err() != nil, err, attempt) {
	case jobPaused:
		log.Info("export paused: the service is stopping")
		_ = m.Nak()
		return
	case jobDone:
	case jobFailed:
		log.Warn("export failed", "attempt", attempt, "err", err)
		s.failExport(context.WithoutCancel(ctx), &spec, err)
	case jobRetry:
		log.Warn("export interrupted; it will resume", "attempt", attempt, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	_ = m.Ack()
}

// jobOutcome is what becomes of one delivery of an export job.
type jobOutcome int

const (
	jobDone   jobOutcome = iota // finished or cancelled: acknowledged
	jobFailed                   // recorded as failed, then acknowledged
	jobRetry                    // delivered again after a pause, to resume
	jobPaused                   // the service is stopping: delivered again, wherever an instance runs
)

// exportOutcome decides a delivery's outcome from the attempt's error: a
// refusal (4xx) fails the job at once, anything else is retried until
// the job has been started exportAttempts times.
func exportOutcome(stopping bool, err error, attempt uint64) jobOutcome {
	switch {
	case stopping:
		return jobPaused
	case err == nil, errors.Is(err, errCancelled):
		return jobDone
	case attempt >= exportAttempts || !isTransient(err):
		return jobFailed
	}
	return jobRetry
}

// isTransient reports an error worth another attempt: anything but a
// refusal (a 4xx), such as the requester losing access.
func isTransient(err error) bool {
	var fe *fhir.Error
	return !errors.As(err, &fe) || fe.Status >= 500
}

// runExportJob runs the job from where its AsyncJob says it stands.
func (s *Service) runExportJob(ctx context.Context, spec *exportSpec, attempt uint64, log *slog.Logger) error {
	sc := repo.Scope{Project: spec.Project}
	cur, err := s.repo.Read(ctx, sc, "AsyncJob", spec.Job)
	if err != nil {
		return err
	}
	job, err := decodeJob(cur)
	if err != nil {
		return err
	}
	if job.Status != "active" {
		return nil // finished, failed or cancelled already
	}
	if attempt > exportAttempts {
		return fhir.Internal()
	}
	// The export reads as its requester, who must still be a member.
	if m, err := s.sessions.GetMembership(ctx, spec.Principal.Membership); errors.Is(err, session.ErrNotFound) || err == nil && !m.Active {
		return fhir.ForbiddenText("The requester of the export is no longer a member of the project")
	} else if err != nil {
		return err
	}
	pol, err := s.policies.For(ctx, &spec.Principal)
	if err != nil {
		return err
	}
	st := stateOf(job)
	version := cur.VersionID
	if attempt > 1 {
		log.Info("export resuming", "attempt", attempt, "files", len(st.Files), "step", st.Step)
	}
	fileBytes := min(exportFileBytes, s.replyBudget()*3/4)
	var buf bytes.Buffer
	count, exported := 0, st.resources()
	lastLog := time.Now()
	// flush stores the buffered file and the job's new position in one
	// transaction: after a crash the job resumes just after the last file.
	var touched []*repo.Resource // the buffered file's, for the audit trail
	flush := func(typ string, step int, after string) error {
		// The file's patients are recorded before it is stored: an export
		// resumed after a crash records a file again rather than never.
		if err := s.recordExported(ctx, spec, typ, touched); err != nil {
			return err
		}
		touched = touched[:0]
		next := st.advance(step, after)
		tctx, tx := s.repo.Begin(ctx)
		if buf.Len() > 0 {
			bin, err := s.repo.Create(tctx, sc, exportBinary(spec.Principal.Profile, buf.Bytes()),
				repo.WriteOptions{Author: spec.Principal.Profile})
			if err != nil {
				return err
			}
			next.Files = append(next.Files, exportFile{Type: typ, URL: "Binary/" + bin.ID, Count: count})
		}
		job.Output = next.output(false)
		m, err := resource.Map(job)
		if err != nil {
			return err
		}
		out, err := s.repo.Update(tctx, sc, m, repo.WriteOptions{IfMatch: version})
		if changed(err) {
			return errCancelled
		}
		if err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			if changed(err) {
				return errCancelled
			}
			return err
		}
		st, version = next, out.VersionID
		exported += count
		buf.Reset()
		count = 0
		if time.Since(lastLog) > 5*time.Second {
			log.Info("export progress", "type", typ, "exported", exported, "files", len(st.Files))
			lastLog = time.Now()
		}
		return nil
	}
	for step := st.Step; step < len(spec.Types); step++ {
		typ := spec.Types[step]
		q, err := exportQuery(spec, typ)
		if err != nil {
			return err
		}
		g := pol.GateIn(s.repo, typ, sc)
		base := q.Filter
		after := ""
		if step == st.Step {
			after = st.After
		}
		for {
			q.Filter = base
			if after != "" {
				q.Filter = append(slices.Clone(base), store.Compare(store.FieldID, store.OpGt, after))
			}
			page, err := g.Search(ctx, q)
			if err != nil {
				return err
			}
			for _, res := range page.Resources {
				if buf.Len() > 0 && buf.Len()+len(res.JSON) >= fileBytes {
					if err := flush(typ, step, after); err != nil {
						return err
					}
				}
				buf.Write(res.JSON)
				buf.WriteByte('\n')
				touched = append(touched, res)
				count++
				after = res.ID
			}
			if !page.More {
				break
			}
		}
		if err := flush(typ, step+1, ""); err != nil {
			return err
		}
	}
	job.Status = "completed"
	job.TransactionTime = job.RequestTime
	job.Output = st.output(true)
	m, err := resource.Map(job)
	if err != nil {
		return err
	}
	if _, err := s.repo.Update(ctx, sc, m, repo.WriteOptions{IfMatch: version}); err != nil {
		if changed(err) {
			return errCancelled
		}
		return err
	}
	log.Info("export completed", "exported", exported, "files", len(st.Files))
	return nil
}

// exportQuery is the search of one type in a job, in id order.
func exportQuery(spec *exportSpec, typ string) (*search.Query, error) {
	v := url.Values{"_count": {strconv.Itoa(exportPage)}}
	if spec.Since != "" {
		v.Set("_lastUpdated", "ge"+spec.Since)
	}
	if spec.Group {
		if typ == "Patient" {
			v.Set("_id", strings.Join(spec.Patients, ","))
		} else {
			refs := make([]string, len(spec.Patients))
			for i, p := range spec.Patients {
				refs[i] = "Patient/" + p
			}
			v.Set("patient", strings.Join(refs, ","))
		}
	}
	q, err := search.Parse(typ, v)
	if err != nil {
		return nil, err
	}
	q.Sort = []store.Sort{{Field: store.FieldID}}
	q.Total = "none"
	return q, nil
}

// failExport records why a job failed, and removes the files it wrote.
func (s *Service) failExport(ctx context.Context, spec *exportSpec, cause error) {
	sc := repo.Scope{Project: spec.Project}
	msg := failureMessage(cause)
	_, err := s.repo.Modify(ctx, sc, "AsyncJob", spec.Job, repo.WriteOptions{}, func(cur *repo.Resource) (map[string]any, error) {
		job, err := decodeJob(cur)
		if err != nil || job.Status != "active" {
			return nil, nil // finished or cancelled meanwhile: nothing to record
		}
		s.deleteFiles(ctx, sc, stateOf(job).Files)
		job.Status = "error"
		job.Output = failedOutput(msg)
		return resource.Map(job)
	})
	if err != nil && !changed(err) {
		s.log.Error("export failure not recorded", "job", spec.Job, "err", err)
	}
}

// failureMessage is what a failed job tells its requester: a refusal's
// own text; for anything else, which may reveal internals, a generic one.
func failureMessage(cause error) string {
	var fe *fhir.Error
	if errors.As(cause, &fe) && fe.Status < 500 && len(fe.Outcome.Issue) > 0 && fe.Outcome.Issue[0].Details != nil {
		return fe.Outcome.Issue[0].Details.Text
	}
	return "The export failed; start it again"
}

// failedOutput is a failed job's output: an OperationOutcome saying why.
func failedOutput(msg string) *resource.Parameters {
	oo, _ := json.Marshal(fhir.OperationOutcome{
		ResourceType: "OperationOutcome",
		Issue:        []fhir.Issue{{Severity: "error", Code: "processing", Details: &fhir.Text{Text: msg}}},
	})
	return &resource.Parameters{ResourceType: "Parameters", Parameter: []resource.Parameter{{Name: "outcome", Resource: oo}}}
}

// failureText reads back the message of a failed job's output.
func failureText(job *resource.AsyncJob) string {
	msg := "The export failed"
	if job.Output == nil {
		return msg
	}
	for _, p := range job.Output.Parameter {
		var oo fhir.OperationOutcome
		// A value of the wrong kind reads as absent, the rest still reads.
		_ = json.Unmarshal(p.Resource, &oo)
		if p.Name == "outcome" && len(oo.Issue) > 0 && oo.Issue[0].Details != nil {
			msg = oo.Issue[0].Details.Text
		}
	}
	return msg
}

func (s *Service) deleteFiles(ctx context.Context, sc repo.Scope, files []exportFile) {
	for _, f := range files {
		if _, id, ok := fhir.SplitReference(f.URL); ok {
			if err := s.repo.Delete(ctx, sc, "Binary", id); err != nil && !fhir.Missing(err) {
				s.log.Warn("export file not deleted", "binary", id, "err", err)
			}
		}
	}
}

// exportStatus is GET /fhir/R4/bulkdata/export/<job>: 202 with progress
// while it runs, 200 with the manifest when done, the job's outcome when
// it failed, 404 once cancelled.
func (s *Service) exportStatus(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	job, _, err := s.readExportJob(ctx, r)
	if err != nil {
		return nil, err
	}
	return exportStatusAnswer(s.cfg.BaseURL, job)
}

// exportStatusAnswer answers a status request from the job's AsyncJob.
func exportStatusAnswer(base string, job *resource.AsyncJob) (*bus.Response, error) {
	st := stateOf(job)
	switch job.Status {
	case "active":
		return &bus.Response{Status: 202, Header: map[string]string{
			"Retry-After": "2",
			"X-Progress":  fmt.Sprintf("%d resources in %d files", st.resources(), len(st.Files)),
		}}, nil
	case "completed":
		output := make([]map[string]any, 0, len(st.Files))
		for _, f := range st.Files {
			output = append(output, map[string]any{"type": f.Type, "url": base + "fhir/R4/" + f.URL, "count": f.Count})
		}
		// The route signs each url (bus.SignsURLs) for a caller who may
		// read the file, so a client downloads it without the token, as
		// from Medplum's presigned URLs.
		return bus.JSON(200, map[string]any{
			"transactionTime":     job.TransactionTime,
			"request":             job.Request,
			"requiresAccessToken": false,
			"output":              output,
			"error":               []any{},
			"deleted":             []any{},
		}), nil
	case "error":
		e := fhir.Internal()
		e.Outcome.Issue[0].Details.Text = failureText(job)
		return nil, e
	}
	return nil, fhir.NotFound()
}

// exportCancel is DELETE /fhir/R4/bulkdata/export/<job>: the job stops at
// its next file and its files are deleted.
func (s *Service) exportCancel(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	_, cur, err := s.readExportJob(ctx, r)
	if err != nil {
		return nil, err
	}
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, err
	}
	if err := pol.AllowResource("AsyncJob", cur.ID, access.Update); err != nil {
		return nil, err
	}
	sc := repo.Scope{Project: cur.Project}
	var files []exportFile
	// A job that wrote a file meanwhile is looked at again (Modify retries).
	_, err = s.repo.Modify(ctx, sc, "AsyncJob", cur.ID, repo.WriteOptions{Author: r.Principal.Profile},
		func(cur *repo.Resource) (map[string]any, error) {
			job, err := decodeJob(cur)
			if err != nil {
				return nil, err
			}
			if done, err := cancelled(job); err != nil || done {
				files = nil
				return nil, err
			}
			files = stateOf(job).Files
			job.Status = "cancelled"
			job.Output = exportState{}.output(true)
			return resource.Map(job)
		})
	if changed(err) {
		return nil, fhir.Conflict("The export is changing too fast to cancel; try again")
	}
	if err != nil {
		return nil, err
	}
	s.deleteFiles(ctx, sc, files)
	return &bus.Response{Status: 202, Header: map[string]string{}}, nil
}

// cancelled says whether a cancel finds the job cancelled already (and
// answers 202 again); only a running or finished job can be cancelled,
// any other is 404.
func cancelled(job *resource.AsyncJob) (bool, error) {
	switch job.Status {
	case "cancelled":
		return true, nil
	case "active", "completed":
		return false, nil
	}
	return false, fhir.NotFound()
}

// readExportJob reads an export's AsyncJob as the caller may see it.
func (s *Service) readExportJob(ctx context.Context, r *bus.Request) (*resource.AsyncJob, *repo.Resource, error) {
	pol, err := s.policies.For(ctx, r.Principal)
	if err != nil {
		return nil, nil, err
	}
	id := r.Param("id")
	if err := pol.AllowResource("AsyncJob", id, access.Read); err != nil {
		return nil, nil, err
	}
	g := pol.Gate(s.repo, "AsyncJob", id)
	res, err := g.Read(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	job, err := decodeJob(res)
	if err != nil {
		return nil, nil, err
	}
	if !isExportJob(job) {
		return nil, nil, fhir.NotFound() // an AsyncJob of another kind
	}
	return job, res, nil
}

// isExportJob tells an export's AsyncJob from other kinds by its request.
func isExportJob(job *resource.AsyncJob) bool {
	return strings.Contains(job.Request, "$export")
}

// decodeJob reads a stored AsyncJob.
func decodeJob(res *repo.Resource) (*resource.AsyncJob, error) {
	var job resource.AsyncJob
	if err := json.Unmarshal(res.JSON, &job); err != nil {
		return nil, fmt.Errorf("decode AsyncJob/%s: %w", res.ID, err)
	}
	return &job, nil
}
