package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// The audit trail (package audit) is stored in blocks (store.TrailBlock),
// not as a resource per event. Its events are AuditEvents all the same:
// the repository reads them by id, and an AuditEvent search finds them
// beside the AuditEvents stored as resources (a bot run's, or one a
// client created), so that every caller — the API, GraphQL, exports, the
// console — sees one type.

// trailServer stands for "no project" in a trail id.
const trailServer = "pinion"

// seqDigits pads a place in a trail id, so that a project's ids sort as
// its places do (an export walks a type in id order).
const seqDigits = 12

// TrailID is the AuditEvent id of the seq-th event of project's trail:
// the project ("pinion" for the server's own events) and the place.
func TrailID(project string, seq int64) string {
	if project == "" {
		project = trailServer
	}
	s := strconv.FormatInt(seq, 10)
	if len(s) < seqDigits {
		s = strings.Repeat("0", seqDigits-len(s)) + s
	}
	return project + "." + s
}

// ParseTrailID reads a trail id; ok is false for any other id.
func ParseTrailID(id string) (project string, seq int64, ok bool) {
	project, s, found := strings.Cut(id, ".")
	if !found || project == "" || len(s) != seqDigits {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 1 {
		return "", 0, false
	}
	if project == trailServer {
		project = ""
	}
	return project, seq, true
}

// trailEvent reads typ and id as a trail event's place.
func trailEvent(typ, id string) (project string, seq int64, ok bool) {
	if typ != "AuditEvent" {
		return "", 0, false
	}
	return ParseTrailID(id)
}

// AppendTrail stores a block after the project's trail (store.Store).
func (r *Repo) AppendTrail(ctx context.Context, b *store.TrailBlock) error {
	return r.st.AppendTrail(ctx, b)
}

// LastTrailBlock is the project's last block (store.ErrNotFound: none).
func (r *Repo) LastTrailBlock(ctx context.Context, project string) (*store.TrailBlock, error) {
	return r.st.LastTrailBlock(ctx, project)
}

// TrailBlocks lists blocks newest first (store.Store).
func (r *Repo) TrailBlocks(ctx context.Context, q *store.TrailQuery) ([]*store.TrailBlock, error) {
	return r.st.TrailBlocks(ctx, q)
}

// PurgeTrail removes the project's blocks that end at or before through.
func (r *Repo) PurgeTrail(ctx context.Context, project string, through int64) (int, error) {
	return r.st.PurgeTrail(ctx, project, through)
}

// TrailReader reads a trail's events one place after another, keeping the
// block in hand: a walk of the chain reads each block once.
type TrailReader struct {
	r     *Repo
	block *store.TrailBlock
	end   map[string]int64 // each project's last place, as last read
}

// NewTrailReader makes a reader.
func (r *Repo) NewTrailReader() *TrailReader { return &TrailReader{r: r, end: map[string]int64{}} }

// Event is the seq-th event of project's trail, exactly as stored:
// fhir.ErrNotFound past the trail's end (a place not taken yet), and
// fhir.ErrGone for a place before its end whose block was removed
// underneath the API (or shortened).
func (tr *TrailReader) Event(ctx context.Context, project string, seq int64) ([]byte, error) {
	b := tr.block
	if b == nil || b.Project != project || seq < b.First || seq > b.Last() {
		var err error
		b, err = tr.r.st.TrailBlock(ctx, project, seq)
		if errors.Is(err, store.ErrNotFound) {
			return nil, tr.missing(ctx, project, seq)
		}
		if err != nil {
			return nil, err
		}
		tr.block = b
	}
	if seq > b.Last() {
		return nil, tr.missing(ctx, project, seq)
	}
	return b.Events[seq-b.First], nil
}

// Block is the block holding place seq (store.Store.TrailBlock: it may
// end before seq).
func (tr *TrailReader) Block(ctx context.Context, project string, seq int64) (*store.TrailBlock, error) {
	return tr.r.st.TrailBlock(ctx, project, seq)
}

// missing tells a place past the end from a hole before it.
func (tr *TrailReader) missing(ctx context.Context, project string, seq int64) error {
	if seq > tr.end[project] {
		last, err := tr.r.st.LastTrailBlock(ctx, project)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil {
			tr.end[project] = last.Last()
		}
	}
	if seq < tr.end[project] {
		return fhir.Gone()
	}
	return fhir.NotFound()
}

// Forget drops what the reader keeps: a walk that goes on after others
// wrote reads the trail's end again.
func (tr *TrailReader) Forget() {
	tr.block = nil
	clear(tr.end)
}

// trailResource is a stored trail event as the repository answers it.
func trailResource(project string, raw []byte) (*Resource, error) {
	var ev struct {
		ID   string `json:"id"`
		Meta struct {
			LastUpdated time.Time `json:"lastUpdated"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("audit trail event: %w", err)
	}
	return &Resource{Type: "AuditEvent", ID: ev.ID, VersionID: "1", LastUpdated: ev.Meta.LastUpdated, Project: project, JSON: raw}, nil
}

// trailRead is Read of a trail id.
func (r *Repo) trailRead(ctx context.Context, sc Scope, project string, seq int64) (*Resource, error) {
	if !sc.allows(project) {
		return nil, fhir.NotFound()
	}
	raw, err := r.NewTrailReader().Event(ctx, project, seq)
	if err != nil {
		return nil, err
	}
	return trailResource(project, raw)
}

// maxTrailScan bounds the events one search reads from the trail: a
// search that would read more is refused, and asks to be narrowed.
const maxTrailScan = 200_000

// trailBatch is how many blocks a search reads at a time: a quiet
// trail's blocks hold a few events each.
const trailBatch = 32

// trailKeyFields are the search fields whose values name a block's keys
// (audit's Event.keys writes them): "field|value", "s_patient|Patient/…"
// for a patient named by any of them.
var trailKeyFields = map[string]bool{"s_patient": true, "s_agent": true, "s_entity": true}

// trailQuery is the block query that finds every block holding an event
// filter may match: the keys filter's conditions require (equality on a
// reference written in full), and the times its date conditions bound.
func trailQuery(project string, filter []store.Cond) *store.TrailQuery {
	q := &store.TrailQuery{Project: project}
	var walk func(cs []store.Cond)
	walk = func(cs []store.Cond) {
		for _, c := range cs {
			switch {
			case c.Op == store.OpAnd:
				walk(c.Sub)
			case c.Op == store.OpEq && trailKeyFields[c.Field] && len(c.Values) == 1:
				v, ok := c.Values[0].(string)
				switch {
				case !ok || !strings.Contains(v, "/"):
				case strings.HasPrefix(v, "Patient/"):
					// A patient has one key, whichever parameter names it.
					q.Keys = append(q.Keys, "s_patient|"+v)
				default:
					q.Keys = append(q.Keys, c.Field+"|"+v)
				}
			case (c.Op == store.OpGe || c.Op == store.OpGt) && c.Field == "s_date_hi" && len(c.Values) == 1:
				if t, ok := c.Values[0].(time.Time); ok && t.After(q.From) {
					q.From = t
				}
			case (c.Op == store.OpLe || c.Op == store.OpLt) && c.Field == "s_date_lo" && len(c.Values) == 1:
				if t, ok := c.Values[0].(time.Time); ok && (q.To.IsZero() || t.Before(q.To)) {
					q.To = t
				}
			}
		}
	}
	walk(filter)
	return q
}

// literals are strings every event matching filter holds in its JSON,
// each followed by its closing quote: the values of its top-level equalities on search fields (a
// token's code, a reference). A block's events are tested for them,
// a byte search, before the search fields of any are computed.
func literals(filter []store.Cond) [][]byte {
	var out [][]byte
	var walk func(cs []store.Cond)
	walk = func(cs []store.Cond) {
		for _, c := range cs {
			if c.Op == store.OpAnd {
				walk(c.Sub)
				continue
			}
			if c.Op != store.OpEq || len(c.Values) != 1 || !literalFields[c.Field] {
				continue
			}
			v, _ := c.Values[0].(string)
			if i := strings.LastIndexByte(v, '|'); i >= 0 {
				v = v[i+1:] // system|code: the code
			}
			if v != "" && plain(v) {
				// Without its opening quote: a reference's id alone ends
				// "Patient/123" as written.
				out = append(out, []byte(v+`"`))
			}
		}
	}
	walk(filter)
	return out
}

// literalFields are the AuditEvent search fields whose values are
// written in the event as they are searched (tokens' codes, references;
// never a string folded for search): what a byte search may look for.
var literalFields = map[string]bool{"s_patient": true, "s_agent": true, "s_entity": true, "s_type": true,
	"s_subtype": true, "s_outcome": true, "s_action": true}

// plain reports whether v is written in JSON as it is, with no escapes.
func plain(v string) bool {
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._/:", r)) {
			return false
		}
	}
	return true
}

// trailScan walks the events of project's trail that meet filter, newest
// first (oldest first from place after when ascending), calling fn with
// each until it answers false.
func (r *Repo) trailScan(ctx context.Context, project string, filter []store.Cond, ascending bool, after int64, fn func(*Resource) bool) error {
	bq := trailQuery(project, filter)
	bq.Limit, bq.Ascending, bq.After = trailBatch, ascending, after
	lits := literals(filter)
	read := 0
	for {
		blocks, err := r.st.TrailBlocks(ctx, bq)
		if err != nil {
			return searchError(ctx, "search", "AuditEvent", err)
		}
		for _, b := range blocks {
			read += len(b.Events)
			if read > maxTrailScan {
				return fhir.BadRequest("Too many audit events to search: narrow the search by patient, agent, entity or date")
			}
			for j := range b.Events {
				i := len(b.Events) - 1 - j
				if ascending {
					i = j
				}
				seq := b.First + int64(i)
				if seq <= after {
					continue
				}
				raw := b.Events[i]
				if !holdsAll(raw, lits) {
					continue
				}
				res, err := trailResource(project, raw)
				if err != nil {
					return err
				}
				if matches(res, filter) && !fn(res) {
					return nil
				}
			}
		}
		if len(blocks) < trailBatch {
			return nil
		}
		last := blocks[len(blocks)-1]
		if ascending {
			bq.After = last.Last()
		} else {
			bq.Before = last.First
		}
	}
}

func holdsAll(raw []byte, lits [][]byte) bool {
	for _, l := range lits {
		if !bytes.Contains(raw, l) {
			return false
		}
	}
	return true
}

// trailProjects are the trails a search in sc reads: its project's, or
// every project's (a super admin's), in project order.
func (r *Repo) trailProjects(ctx context.Context, sc Scope) ([]string, error) {
	if !sc.AllProjects {
		return []string{sc.Project}, nil
	}
	return r.st.TrailProjects(ctx)
}

// trailMatches reads the trail's events that meet filter, each project's
// newest first (in id order, oldest first, when byID), skipping skip of
// them and answering at most limit (limit < 0: all); counted is how many
// it met in all when it read to the end (-1 when it stopped at limit).
func (r *Repo) trailMatches(ctx context.Context, sc Scope, filter []store.Cond, byID bool, skip, limit int) (out []*Resource, counted int, err error) {
	projects, err := r.trailProjects(ctx, sc)
	if err != nil {
		return nil, 0, err
	}
	met, full := 0, false
	for _, p := range projects {
		after := int64(0)
		if byID {
			after = afterPlace(p, filter)
		}
		err := r.trailScan(ctx, p, filter, byID, after, func(res *Resource) bool {
			if met++; met <= skip {
				return true
			}
			if limit >= 0 && len(out) == limit {
				full = true
				return false
			}
			out = append(out, res)
			return true
		})
		if err != nil {
			return nil, 0, err
		}
		if full {
			return out, -1, nil
		}
	}
	return out, met, nil
}

// afterPlace is the place an _id > condition on project's trail ids
// starts after, 0 when the filter has none.
func afterPlace(project string, filter []store.Cond) int64 {
	for _, c := range filter {
		if c.Field != store.FieldID || c.Op != store.OpGt || len(c.Values) != 1 {
			continue
		}
		// Another id (a stored AuditEvent's) bounds nothing here: the
		// condition itself is matched on each event.
		id, _ := c.Values[0].(string)
		if p, seq, ok := ParseTrailID(id); ok && p == project {
			return seq
		}
	}
	return 0
}

// matches reports whether a trail event meets every condition.
func matches(res *Resource, filter []store.Cond) bool {
	d := search.StoredDoc(res.Type, res.ID, res.Project, res.LastUpdated, res.JSON)
	for _, c := range filter {
		if !store.Matches(c, d.Field) {
			return false
		}
	}
	return true
}
