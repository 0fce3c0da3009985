package fhirsvc

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// auditVerify is GET /admin/super/audit/verify?project=<id>: whether a
// project's audit trail is whole, and where it first breaks (a super
// admin's; project "" or absent is the server's own trail). A long chain
// is answered a part at a time: whole so far, and next, to ask again with
// from=<next>.
func (s *Service) auditVerify(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil || !r.Principal.SuperAdmin {
		return nil, fhir.Forbidden()
	}
	project := r.Query.Get("project")
	if project != "" && uuid.Validate(project) != nil {
		return nil, fhir.BadRequest("Invalid project", "project")
	}
	lim := audit.Limits{Until: time.Now().Add(verifyTime)}
	if from := r.Query.Get("from"); from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 2 {
			return nil, fhir.BadRequest("Invalid from: want the next of an earlier answer", "from")
		}
		lim.After = n - 1
	}
	// Half the request's own time at most: the other half is for the read
	// in hand when the walk's time runs out, which a store under load can
	// take long to answer.
	if d, ok := ctx.Deadline(); ok {
		if half := time.Now().Add(time.Until(d) / 2); half.Before(lim.Until) {
			lim.Until = half
		}
	}
	rep, err := audit.VerifyWithin(ctx, s.repo, project, lim)
	if err != nil {
		return nil, err
	}
	return bus.JSON(200, rep), nil
}

// verifyTime bounds one answer of auditVerify: a chain of millions is
// walked a part at a time (the answer's next, given back as from); the
// command (pinion audit verify) walks it whole.
const verifyTime = 10 * time.Second

// recordAccess records a request that returned resources of patients'
// records, as BALP's Patient privacy pattern: one event per request
// naming every patient touched, none for a request that touched none, and
// none when the caller's project turned read auditing off (Project.setting
// auditReads false; on otherwise). Recorded before the answer: a read the
// trail cannot record is not answered.
func (s *Service) recordAccess(ctx context.Context, r *bus.Request, kind audit.Kind, what []audit.Entity, found []*repo.Resource) error {
	if s.audit == nil || r.Principal == nil || len(found) == 0 {
		return nil
	}
	byProject := patientsOf(found)
	if c, ok := ctx.Value(accessesKey{}).(*accesses); ok {
		c.add(byProject) // one request of many (GraphQL's): its caller records them once
		return nil
	}
	return s.recordPatients(ctx, r, kind, what, byProject)
}

// namedPatients bounds the patients one event names: a file of an export
// can hold thousands, and an event must fit a message.
const namedPatients = 500

// recordExported records the patients whose resources one file of a bulk
// export holds, as the export's requester.
func (s *Service) recordExported(ctx context.Context, spec *exportSpec, typ string, found []*repo.Resource) error {
	if s.audit == nil {
		return nil
	}
	r := &bus.Request{Principal: &spec.Principal, Remote: spec.Remote}
	what := []audit.Entity{{What: "AsyncJob/" + spec.Job, Detail: "bulk export of " + typ}}
	return s.recordPatients(ctx, r, audit.PatientExport, what, patientsOf(found))
}

// patientsOf are the patients whose records resources are, each once, by
// the project that holds them: a read is recorded in the trail of the
// project whose records were read (a super admin's reads reach any).
func patientsOf(found []*repo.Resource) map[string][]string {
	out := map[string][]string{}
	seen := map[string]bool{} // a page holds up to a thousand resources
	for _, res := range found {
		// An AuditEvent names patients, but is the trail's record, not
		// theirs: reading the trail is not reading a patient's record.
		if res == nil || res.Deleted || res.Type == "AuditEvent" {
			continue
		}
		ps, _ := repo.Memo(res, "audit.patients", func(b []byte) ([]string, error) {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, err
			}
			return search.Patients(res.Type, res.ID, m), nil
		})
		for _, p := range ps {
			if k := res.Project + " " + p; !seen[k] {
				seen[k] = true
				out[res.Project] = append(out[res.Project], p)
			}
		}
	}
	return out
}

// recordPatients records that request r touched patients' records: an
// event in each project whose records it read, naming its patients, in
// events of at most namedPatients each (a search may return a thousand,
// and an event must fit a message).
func (s *Service) recordPatients(ctx context.Context, r *bus.Request, kind audit.Kind, what []audit.Entity, byProject map[string][]string) error {
	projects := slices.Sorted(maps.Keys(byProject))
	for _, project := range projects {
		if !s.readsAudited(ctx, project) {
			continue
		}
		for patients := byProject[project]; len(patients) > 0; {
			n := min(len(patients), namedPatients)
			e := audit.Event{Kind: kind.Name, Project: project, Who: r.Principal.User, Client: audit.ClientRef(r.Principal.ClientID),
				Address: r.Remote, Entities: what, Patients: patients[:n]}
			if err := s.audit.Record(ctx, e); err != nil {
				s.log.ErrorContext(ctx, "read not answered: the audit trail did not take its event", "err", err)
				return fhir.Unavailable("The audit trail is unavailable; try again")
			}
			patients = patients[n:]
		}
	}
	return nil
}

// readsAudited reports whether project records reads of patients'
// records: unless its setting auditReads says false.
func (s *Service) readsAudited(ctx context.Context, project string) bool {
	p, err := s.repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		return true
	}
	on, _ := repo.Memo(p, "fhir.auditReads", func(b []byte) (bool, error) {
		v, set := projects.Setting(b, "auditReads")
		return v || !set, nil
	})
	return on
}

// securityTypes are the resources whose changes change who may do what:
// their creation, change and deletion through the API is recorded, as
// BALP's security alert.
var securityTypes = map[string]bool{"ProjectMembership": true, "AccessPolicy": true, "ClientApplication": true,
	"Bot": true, "Project": true, "DomainConfiguration": true, "User": true}

// recordChange records a write of a security setting (action C, U or D):
// who, through which client, on what. It is called once the write is
// stored and before it is answered: a change the trail cannot take is
// answered 503 (and stays, as a change an audit missed is logged).
func (s *Service) recordChange(ctx context.Context, r *bus.Request, action, typ, id, project string) error {
	if s.audit == nil || !securityTypes[typ] || r.Principal == nil {
		return nil
	}
	kind := audit.ConfigChanged
	if typ == "ProjectMembership" {
		kind = map[string]audit.Kind{"C": audit.MemberInvited, "U": audit.MemberChanged, "D": audit.MemberRemoved}[action]
	}
	if typ == "Project" && project == "" {
		project = id
	}
	e := audit.Event{Kind: kind.Name, Action: action, Project: project, Who: r.Principal.User, Client: audit.ClientRef(r.Principal.ClientID),
		Address: r.Remote, Entities: []audit.Entity{{What: typ + "/" + id, Detail: r.Method + " " + r.Path}}}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "a security setting changed, but the audit trail did not take its event", "type", typ, "id", id, "err", err)
		return fhir.Unavailable("The audit trail is unavailable; the change was stored but not recorded")
	}
	return nil
}

// accesses gathers the patients the reads and searches of one request
// touch when that request makes many (a GraphQL query answers through the
// REST handlers), so that the request records one event naming them all.
type accesses struct {
	mu        sync.Mutex
	byProject map[string][]string
	seen      map[string]bool
}

type accessesKey struct{}

func (a *accesses) add(byProject map[string][]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen, a.byProject = map[string]bool{}, map[string][]string{}
	}
	for project, ps := range byProject {
		for _, p := range ps {
			if k := project + " " + p; !a.seen[k] {
				a.seen[k] = true
				a.byProject[project] = append(a.byProject[project], p)
			}
		}
	}
}

// gatherAccesses is ctx for the reads of one request made of many; record
// records what they touched, as one event of kind.
func (s *Service) gatherAccesses(ctx context.Context) (context.Context, func(ctx context.Context, r *bus.Request, kind audit.Kind, what []audit.Entity) error) {
	a := &accesses{}
	return context.WithValue(ctx, accessesKey{}, a), func(ctx context.Context, r *bus.Request, kind audit.Kind, what []audit.Entity) error {
		a.mu.Lock()
		byProject := maps.Clone(a.byProject)
		a.mu.Unlock()
		if s.audit == nil || r.Principal == nil {
			return nil
		}
		return s.recordPatients(ctx, r, kind, what, byProject)
	}
}
