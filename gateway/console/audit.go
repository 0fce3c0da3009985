package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// The audit trail (issue 54, docs/audit.md): the project's AuditEvents,
// newest first, filtered by when, what, outcome, who and patient, and one
// patient's "who looked at this record". Both are the API's AuditEvent
// search as the signed-in person: whoever the API refuses the type sees
// its refusal.

const (
	// auditPage is how many events a page shows.
	auditPage = 50
	// maxAuditOffset bounds paging: past it, narrow the filter.
	maxAuditOffset = 10000
	// maxFilterChars bounds every filter value.
	maxFilterChars = 200
)

// auditFilter is the audit page's filter form, as typed: each field is
// checked by readAuditFilter before it becomes a search parameter.
type auditFilter struct {
	From, To, Kind, Outcome, Who, Patient string
	// Email is the address typed at a sign-in: a refused one names nobody
	// (agent.who), only what was typed (agent.name). With Who, events of
	// either: a person's sign-ins, refusals included.
	Email  string
	Offset int
}

// outcomeCodes are the outcome filter's choices, as AuditEvent.outcome.
var outcomeCodes = map[string]string{"succeeded": outcomeSuccess, "refused": outcomeRefused}

var (
	// fhirID is a FHIR id: what a reference may name.
	fhirID = regexp.MustCompile(`^[A-Za-z0-9\-.]{1,64}$`)
	// reference is a relative reference, Type/id.
	reference = regexp.MustCompile(`^[A-Z][A-Za-z]{1,63}/[A-Za-z0-9\-.]{1,64}$`)
	// email is an address as a filter takes it: nothing that would need
	// quoting in a _filter string.
	email = regexp.MustCompile(`^[^\s"\\@]+@[^\s"\\@]+$`)
)

// readAuditFilter reads the filter from a request's query (get), and says
// what is wrong with it by field. Nothing unchecked reaches the search.
func readAuditFilter(get func(string) string) (auditFilter, map[string]string) {
	f := auditFilter{
		From: strings.TrimSpace(get("from")), To: strings.TrimSpace(get("to")), Kind: get("kind"),
		Outcome: get("outcome"), Who: strings.TrimSpace(get("who")), Patient: strings.TrimSpace(get("patient")),
		// Sign-in lower-cases the address before it records it.
		Email: strings.ToLower(strings.TrimSpace(get("email"))),
	}
	errs := map[string]string{}
	for field, v := range f.fields() {
		if len(v) > maxFilterChars {
			errs[field] = "At most " + strconv.Itoa(maxFilterChars) + " characters."
		}
	}
	if errs["from"] == "" && f.From != "" && !isDate(f.From) {
		errs["from"] = "Not a date: write it as 2026-12-01."
	}
	if errs["to"] == "" && f.To != "" && !isDate(f.To) {
		errs["to"] = "Not a date: write it as 2026-12-01."
	}
	if errs["kind"] == "" && f.Kind != "" && !knownKind(f.Kind) {
		errs["kind"] = "Not a kind of event Pinion records."
	}
	if _, ok := outcomeCodes[f.Outcome]; errs["outcome"] == "" && f.Outcome != "" && !ok {
		errs["outcome"] = "Choose any, succeeded or refused."
	}
	if errs["who"] == "" && f.Who != "" && !reference.MatchString(f.Who) {
		errs["who"] = "Not a reference: write it as User/<id> (or ClientApplication/<id>, Bot/<id>)."
	}
	if errs["email"] == "" && f.Email != "" && !email.MatchString(f.Email) {
		errs["email"] = "Not an e-mail address."
	}
	if errs["patient"] == "" && f.Patient != "" {
		// Patient/<id>, or the id alone.
		if id := strings.TrimPrefix(f.Patient, "Patient/"); fhirID.MatchString(id) {
			f.Patient = "Patient/" + id
		} else {
			errs["patient"] = "Not a patient: write it as Patient/<id>."
		}
	}
	var ok bool
	if f.Offset, ok = readOffset(get("offset")); !ok {
		errs["offset"] = offsetProblem
	}
	return f, errs
}

const offsetProblem = "Not a page of this list: start again from the first."

// readOffset reads a page's offset: none is 0.
func readOffset(s string) (int, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxAuditOffset {
		return 0, false
	}
	return n, true
}

// isDate reports whether s is a day, as the form's date fields send it:
// the search takes it as that whole day, in UTC.
func isDate(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}

func knownKind(name string) bool {
	for _, k := range auditKinds {
		if k.Name == name {
			return true
		}
	}
	return false
}

// query is the API's AuditEvent search for the filter: newest first, one
// page.
func (f auditFilter) query() url.Values {
	q := url.Values{"_sort": {"-date"}, "_count": {strconv.Itoa(auditPage)}, "_offset": {strconv.Itoa(f.Offset)}}
	if f.From != "" {
		q.Add("date", "ge"+f.From)
	}
	if f.To != "" {
		q.Add("date", "le"+f.To)
	}
	if f.Kind != "" {
		q.Set("subtype", auditSystem+"|"+f.Kind)
	}
	if code := outcomeCodes[f.Outcome]; code != "" {
		q.Set("outcome", code)
	}
	// The agent by its id alone: the search refuses agent=User/<id>
	// (AuditEvent-agent's targets, from Medplum's definitions, name no
	// User, ClientApplication or Bot) and finds a bare id whatever its
	// type. The server makes every id, a UUID: no other agent shares it.
	_, who, _ := strings.Cut(f.Who, "/")
	switch {
	case f.Who != "" && f.Email != "":
		q.Set("_filter", `agent eq "`+who+`" or agent-name eq "`+f.Email+`"`)
	case f.Who != "":
		q.Set("agent", who)
	case f.Email != "":
		q.Set("agent-name:exact", f.Email)
	}
	if f.Patient != "" {
		q.Set("patient", f.Patient)
	}
	return q
}

// fields are the filter's values by form field.
func (f auditFilter) fields() map[string]string {
	return map[string]string{"from": f.From, "to": f.To, "kind": f.Kind, "outcome": f.Outcome, "who": f.Who,
		"email": f.Email, "patient": f.Patient}
}

// values is the filter as the console's own query string, for the next
// page's link.
func (f auditFilter) values(offset int) url.Values {
	v := url.Values{}
	for k, s := range f.fields() {
		if s != "" {
			v.Set(k, s)
		}
	}
	v.Set("offset", strconv.Itoa(offset))
	return v
}

// auditView is what the audit pages show.
type auditView struct {
	Filter auditFilter
	Kinds  []auditKind
	Events []auditRow
	// PatientRef is the patient page's patient.
	PatientRef string
}

// auditRow is one event as a row of the table.
type auditRow struct {
	When, Recorded string // as shown, and as recorded
	What           string
	Who, WhoRef    string // a name where the project knows one, and the reference
	Client         string // the client application the person acted through
	From           string
	Outcome        string // succeeded, refused, failed
	Detail         string // outcomeDesc
	Refused        bool
	Patients       []string // ids of the patients the event touched
}

// auditEvent is what the rows read of an AuditEvent.
type auditEvent struct {
	Recorded string   `json:"recorded"`
	Type     coding   `json:"type"`
	Subtype  []coding `json:"subtype"`
	Outcome  string   `json:"outcome"`
	Desc     string   `json:"outcomeDesc"`
	Agent    []struct {
		Who       *fhir.Reference `json:"who"`
		Name      string          `json:"name"`
		Requestor bool            `json:"requestor"`
		Network   *struct {
			Address string `json:"address"`
		} `json:"network"`
	} `json:"agent"`
	Entity []struct {
		What fhir.Reference `json:"what"`
		Role coding         `json:"role"`
	} `json:"entity"`
}

// rowOf is one AuditEvent as a row of the table; names are the project's
// members by user reference (memberNames), shown for who and client.
func rowOf(e auditEvent, names map[string]string) auditRow {
	r := auditRow{Recorded: e.Recorded, When: e.Recorded, What: what(e), Detail: e.Desc}
	if t, err := time.Parse(time.RFC3339, e.Recorded); err == nil {
		r.When = t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	switch e.Outcome {
	case outcomeSuccess:
		r.Outcome, r.Detail = "succeeded", ""
	case outcomeRefused:
		r.Outcome, r.Refused = "refused", true
	default:
		r.Outcome, r.Refused = "failed", true
	}
	for _, a := range e.Agent {
		name := a.Name
		if a.Who != nil {
			name = or(a.Who.Display, names[a.Who.Reference])
		}
		if !a.Requestor {
			if r.Client == "" && a.Who != nil {
				r.Client = or(name, a.Who.Reference)
			}
			continue
		}
		if a.Who != nil {
			r.WhoRef = a.Who.Reference
		}
		r.Who = or(name, r.WhoRef)
		if a.Network != nil {
			r.From = a.Network.Address
		}
	}
	for _, en := range e.Entity {
		if id, ok := strings.CutPrefix(en.What.Reference, "Patient/"); ok && fhirID.MatchString(id) {
			r.Patients = append(r.Patients, id)
		}
	}
	return r
}

// what names an event's kind: Pinion's own subtype, as auditKinds
// displays it today, else the first subtype or the type (a bot run's
// event, one made through the API).
func what(e auditEvent) string {
	for _, c := range e.Subtype {
		if c.System != auditSystem {
			continue
		}
		for _, k := range auditKinds {
			if k.Name == c.Code {
				return k.Display
			}
		}
		return or(c.Display, c.Code)
	}
	if len(e.Subtype) > 0 {
		return or(e.Subtype[0].Display, e.Subtype[0].Code)
	}
	return or(e.Type.Display, e.Type.Code)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// memberNames finds the names the project knows its events' agents by:
// each member's profile name, by user reference (a person's User, a
// client's ClientApplication, a bot's Bot), in one search. An agent it
// does not find (a former member, the search refused) is shown by its
// reference.
func (c *Console) memberNames(fc *fiber.Ctx, s *session, events []auditEvent) map[string]string {
	seen := map[string]bool{}
	var refs []string
	for _, e := range events {
		for _, a := range e.Agent {
			if a.Who == nil || a.Who.Display != "" || seen[a.Who.Reference] || !reference.MatchString(a.Who.Reference) {
				continue
			}
			seen[a.Who.Reference] = true
			refs = append(refs, a.Who.Reference)
		}
	}
	names := map[string]string{}
	if len(refs) == 0 {
		return names
	}
	// Two agents an event at most, a page of auditPage events: within the
	// search's 100 values of one parameter.
	ms, resp, err := c.searchAll(fc, s, "ProjectMembership", url.Values{"user": {strings.Join(refs, ",")}, "_count": {"100"}})
	if err != nil || resp.Status != 200 {
		c.log.Warn("console: audit agents not named", "err", err)
		return names
	}
	for _, raw := range ms {
		var m struct {
			User    fhir.Reference `json:"user"`
			Profile fhir.Reference `json:"profile"`
		}
		if json.Unmarshal(raw, &m) == nil && m.Profile.Display != "" {
			names[m.User.Reference] = m.Profile.Display
		}
	}
	return names
}

// bundleLink is one of a Bundle's links.
type bundleLink struct {
	Relation string `json:"relation"`
	URL      string `json:"url"`
}

// auditEvents runs an AuditEvent search as the signed-in person, and
// returns its rows and the offset of the next page (0 for none).
func (c *Console) auditEvents(fc *fiber.Ctx, s *session, q url.Values) ([]auditRow, int, *bus.Response, error) {
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/AuditEvent", map[string]string{"type": "AuditEvent"}, q, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, 0, resp, err
	}
	var b struct {
		Entry []struct {
			Resource auditEvent `json:"resource"`
		} `json:"entry"`
		Link []bundleLink `json:"link"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, 0, nil, fmt.Errorf("audit events: %w", err)
	}
	events := make([]auditEvent, len(b.Entry))
	for i, e := range b.Entry {
		events[i] = e.Resource
	}
	names := c.memberNames(fc, s, events)
	rows := make([]auditRow, len(events))
	for i, e := range events {
		rows[i] = rowOf(e, names)
	}
	return rows, nextOffset(b.Link), resp, nil
}

// nextOffset is the _offset of a Bundle's next link: where the service
// says the next page starts (a page may be cut short to fit), or 0.
func nextOffset(links []bundleLink) int {
	for _, l := range links {
		if l.Relation != "next" {
			continue
		}
		if u, err := url.Parse(l.URL); err == nil {
			if n, err := strconv.Atoi(u.Query().Get("_offset")); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// auditLog is the project's events, newest first, with the filter form.
func (c *Console) auditLog(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	f, errs := readAuditFilter(func(k string) string { return fc.Query(k) })
	d := page{Title: "Audit trail", CSRF: s.csrf(), Project: &project{}, Errors: errs,
		Audit: &auditView{Filter: f, Kinds: auditKinds}}
	if len(errs) > 0 {
		d.Problem = "Some of the filter is not right; nothing was searched."
		if msg := errs["offset"]; msg != "" {
			d.Problem = msg
		}
		return c.render(fc, 400, "audit", d)
	}
	rows, next, resp, err := c.auditEvents(fc, s, f.query())
	if err != nil {
		return err
	}
	switch {
	case resp.Status == 400:
		// A filter the search refuses: the form stays, with its reason.
		d.Problem = failure(resp)
		return c.render(fc, 400, "audit", d)
	case resp.Status != 200:
		return c.message(fc, resp.Status, "Audit trail", failure(resp))
	}
	d.Audit.Events = rows
	if next > 0 && next <= maxAuditOffset {
		d.Next = c.cfg.BaseURL + "console/audit?" + f.values(next).Encode()
	}
	return c.render(fc, 200, "audit", d)
}

// auditPatient is who looked at one patient's record: the events whose
// patient is Patient/<id>, under a heading that names the patient when
// the signed-in person may read them.
func (c *Console) auditPatient(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	if !fhirID.MatchString(id) {
		return c.message(fc, 400, "Who looked at this record", "Not a patient id.")
	}
	offset, ok := readOffset(fc.Query("offset"))
	if !ok {
		return c.message(fc, 400, "Who looked at this record", offsetProblem)
	}
	f := auditFilter{Patient: "Patient/" + id, Offset: offset}
	d := page{Title: "Who looked at " + f.Patient, CSRF: s.csrf(), Project: &project{},
		Audit: &auditView{Filter: f, PatientRef: f.Patient}}
	resp, err := c.read(fc, s, "Patient", id)
	if err != nil {
		return err
	}
	if resp.Status == 200 {
		var p struct {
			Name []humanName `json:"name"`
		}
		if json.Unmarshal(resp.Body, &p) == nil {
			if name := nameOf(p.Name); name != "" {
				d.Title = "Who looked at " + name
			}
		}
	} else {
		d.Problem = "This patient's record could not be read (" + failure(resp) + "); the events that name it follow."
	}
	rows, next, resp, err := c.auditEvents(fc, s, f.query())
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, d.Title, failure(resp))
	}
	d.Audit.Events = rows
	if next > 0 && next <= maxAuditOffset {
		d.Next = c.cfg.BaseURL + "console/audit/patient/" + url.PathEscape(id) + "?offset=" + strconv.Itoa(next)
	}
	return c.render(fc, 200, "auditpatient", d)
}

// humanName is a FHIR HumanName, as far as a heading needs it.
type humanName struct {
	Use    string   `json:"use"`
	Text   string   `json:"text"`
	Given  []string `json:"given"`
	Family string   `json:"family"`
}

// nameOf is a patient's name to show: the official one, else the first;
// its text, else given names and family.
func nameOf(names []humanName) string {
	if len(names) == 0 {
		return ""
	}
	n := names[0]
	for _, m := range names {
		if m.Use == "official" {
			n = m
			break
		}
	}
	if n.Text != "" {
		return n.Text
	}
	return strings.TrimSpace(strings.Join(append(append([]string{}, n.Given...), n.Family), " "))
}
