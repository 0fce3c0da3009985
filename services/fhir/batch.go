package fhirsvc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// maxBatchEntries bounds one batch or transaction.
const maxBatchEntries = 1000

// entryReserve is room kept in a batch's answer for each entry's response
// without its resource (status, location, etag, or a short outcome).
const entryReserve = 512

type batchEntry struct {
	FullURL  string          `json:"fullUrl"`
	Resource json.RawMessage `json:"resource"`
	Request  *struct {
		Method      string `json:"method"`
		URL         string `json:"url"`
		IfMatch     string `json:"ifMatch"`
		IfNoneExist string `json:"ifNoneExist"`
	} `json:"request"`
}

type entryResponse struct {
	Status       string          `json:"status"`
	Location     string          `json:"location,omitempty"`
	Etag         string          `json:"etag,omitempty"`
	LastModified string          `json:"lastModified,omitempty"`
	Outcome      json.RawMessage `json:"outcome,omitempty"`
}

type responseEntry struct {
	Resource json.RawMessage `json:"resource,omitempty"`
	Response entryResponse   `json:"response"`
}

// batch is POST /fhir/R4 with a batch or transaction Bundle. Each entry
// runs through the same handler as its own request would, as the caller.
//
// A transaction's writes are gathered (repo.Tx) and stored together at the
// end: all or nothing on SQLite, with one commit. It stops at its first
// failing entry, having written nothing. On a store without transactions
// (FerretDB) a failed commit may have stored part: what it created is
// deleted again. A transaction writing memberships, access policies or
// client applications keeps the older way, writing entry by entry (their
// session updates happen as each is written) and deleting what it created
// if a later entry fails.
func (s *Service) batch(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil {
		return nil, fhir.Unauthorized()
	}
	b, err := parseBundle(r)
	if err != nil {
		return nil, err
	}
	outer := ctx // without the transaction: undo must really delete
	var txn *repo.Tx
	if b.tx() && !touchesSessions(s.cfg.BaseURL, b.Entry) {
		ctx, txn = s.repo.Begin(ctx)
	}
	run := newBundleRun(s.cfg.BaseURL, b, s.replyBudget())
	if d, ok := ctx.Deadline(); ok && !b.tx() {
		run.stopAt = d.Add(-answerReserve(time.Until(d)))
	}
	if err := run.run(ctx, func(ctx context.Context, e batchEntry, assigned string) (*bus.Response, error) {
		return s.runEntry(ctx, r, e, assigned)
	}); err != nil {
		if txn == nil {
			s.undo(outer, run.created)
		}
		return nil, err
	}
	if txn != nil {
		// The caller is answered 504 once its deadline passes, whatever
		// happens here: a transaction it cannot hear about must not stay.
		// So commit only with time to answer, and undo a commit that
		// finished too late anyway.
		if d, ok := ctx.Deadline(); ok && time.Until(d) < commitMargin {
			return nil, fhir.Timeout("")
		}
		if err := txn.Commit(outer); err != nil {
			s.undo(outer, run.created) // a store without transactions may have stored part
			return nil, err
		}
		if ctx.Err() != nil {
			s.undo(outer, run.created)
			return nil, fhir.Timeout("")
		}
	}
	return run.response()
}

// bundleRequest is a batch or transaction Bundle as posted.
type bundleRequest struct {
	ResourceType string       `json:"resourceType"`
	Type         string       `json:"type"`
	Entry        []batchEntry `json:"entry"`
}

func (b *bundleRequest) tx() bool { return b.Type == "transaction" }

// parseBundle reads a batch or transaction Bundle: 415 for a body that is
// not JSON, 400 for one that is not a Bundle of either type, 413 for more
// than maxBatchEntries entries.
func parseBundle(r *bus.Request) (*bundleRequest, error) {
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	if _, err := fhir.Decode(r.Body); err != nil {
		return nil, err
	}
	var b bundleRequest
	if err := json.Unmarshal(r.Body, &b); err != nil || b.ResourceType != "Bundle" {
		return nil, fhir.BadRequest("Not a bundle", "resourceType")
	}
	if b.Type != "batch" && b.Type != "transaction" {
		return nil, fhir.BadRequest("Bundle type must be batch or transaction", "type")
	}
	if len(b.Entry) > maxBatchEntries {
		return nil, fhir.TooLarge("A bundle may hold at most " + strconv.Itoa(maxBatchEntries) + " entries")
	}
	return &b, nil
}

// entryOrder is the order a bundle's entries run in: a batch's as given; a
// transaction's creates (POST) first so that later entries can refer to
// them by their urn:uuid fullUrl, then the rest, each in bundle order.
func entryOrder(entries []batchEntry, tx bool) []int {
	order := make([]int, 0, len(entries))
	if tx {
		for i, e := range entries {
			if e.isMethod("POST") {
				order = append(order, i)
			}
		}
	}
	for i, e := range entries {
		if !tx || !e.isMethod("POST") {
			order = append(order, i)
		}
	}
	return order
}

// isMethod reports whether the entry's request has the method, in any case.
func (e batchEntry) isMethod(m string) bool {
	return e.Request != nil && strings.EqualFold(e.Request.Method, m)
}

// entryRunner runs one entry as its own request; assigned, when not "",
// is the id a transaction gives the entry's create.
type entryRunner func(ctx context.Context, e batchEntry, assigned string) (*bus.Response, error)

// bundleRun is one bundle's progress: the answers so far, and what its
// entries created.
type bundleRun struct {
	base    string
	tx      bool
	entries []batchEntry
	out     []responseEntry
	// room is what is left of the answer for resources and long outcomes,
	// each entry's status line being reserved up front.
	room int
	// refs maps a created entry's urn:uuid fullUrl to its Type/id.
	refs map[string]string
	// created are the Type/id of the creates run so far (one that failed
	// in a transaction included: a deadline may have cut it off after its
	// write), for undo.
	created []string
	// sessionRevs are the newest session revision per bucket an entry
	// wrote: the whole answer waits for them.
	sessionRevs map[string]uint64
	// stopAt, when set, is when a batch stops running entries, leaving
	// itself time to answer before the request's deadline: its reads
	// (searches above all) are cut off then, and no entry starts after.
	stopAt time.Time
}

// answerReserve is the part of a batch's remaining time kept for answering
// rather than running entries: a tenth, at most two seconds.
func answerReserve(left time.Duration) time.Duration {
	return min(left/10, 2*time.Second)
}

// notRunEntry answers an entry a batch did not start because its time ran
// out.
func notRunEntry() responseEntry {
	return outcomeEntry(fhir.Unavailable("Entry not run: the batch ran out of time"))
}

// outOfTime reports whether a bundle must start no more entries: its
// request's context is done, or a batch reached stopAt.
func (b *bundleRun) outOfTime(ctx context.Context) bool {
	return ctx.Err() != nil || !b.stopAt.IsZero() && !time.Now().Before(b.stopAt)
}

func newBundleRun(base string, b *bundleRequest, budget int) *bundleRun {
	return &bundleRun{
		base: base, tx: b.tx(), entries: b.Entry, out: make([]responseEntry, len(b.Entry)),
		room: budget - len(b.Entry)*entryReserve,
		refs: map[string]string{}, sessionRevs: map[string]uint64{},
	}
}

// tooLargeEntry answers an entry left out of a full answer.
func tooLargeEntry() responseEntry {
	return outcomeEntry(fhir.TooLarge("Entry not answered: the batch's answer would be too large; read it on its own"))
}

// run runs the entries in entryOrder. A batch answers each failure in its
// entry; a transaction stops at its first failure and returns it.
//
// Once the request's time is spent (outOfTime) no entry starts: a batch
// answers the rest 503 without running them, a transaction fails 504. A
// batch's reads run only until stopAt, so that a search still running then
// is interrupted (503) rather than holding the store past the deadline;
// writes keep the request's deadline, as they would on their own.
//
// The answer must fit on the bus: resources are included while they fit.
// A read that no longer fits is answered 413 (and not run once nothing
// fits); a write is still done and answered without its resource.
func (b *bundleRun) run(ctx context.Context, exec entryRunner) error {
	for _, i := range entryOrder(b.entries, b.tx) {
		e := b.entries[i]
		if b.outOfTime(ctx) {
			if b.tx {
				return fhir.Timeout("")
			}
			b.out[i] = notRunEntry()
			continue
		}
		read := e.isMethod("GET")
		if read && b.room <= 0 {
			b.out[i] = tooLargeEntry()
			continue
		}
		if b.tx {
			e.Resource = rewriteRefs(e.Resource, b.refs)
		}
		assigned := ""
		if b.tx && e.isMethod("POST") {
			assigned = repo.NewID()
		}
		resp, err := b.exec(ctx, exec, e, assigned, read)
		if err != nil {
			fe := fhir.AsError(err)
			if b.tx {
				if assigned != "" {
					if typ := entryType(b.base, e); typ != "" {
						b.created = append(b.created, typ+"/"+assigned)
					}
				}
				return fe
			}
			b.out[i], b.room = failedEntry(fe, b.room)
			continue
		}
		if bucket, rev, ok := resp.Session(); ok && rev > b.sessionRevs[bucket] {
			b.sessionRevs[bucket] = rev
		}
		b.out[i], b.room = answeredEntry(resp, read, b.room)
		if ref := createdRef(resp); ref != "" {
			b.created = append(b.created, ref)
			if strings.HasPrefix(e.FullURL, "urn:uuid:") {
				b.refs[e.FullURL] = ref
			}
		}
	}
	return nil
}

// exec runs one entry; a batch's read only until stopAt.
func (b *bundleRun) exec(ctx context.Context, exec entryRunner, e batchEntry, assigned string, read bool) (*bus.Response, error) {
	if read && !b.stopAt.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, b.stopAt)
		defer cancel()
	}
	resp, err := exec(ctx, e, assigned)
	if err != nil && ctx.Err() != nil && !errors.As(err, new(*fhir.Error)) {
		// Cut off by its time, not broken: say so rather than 500.
		return nil, fhir.Unavailable("Entry took too long")
	}
	return resp, err
}

// response is the batch-response or transaction-response Bundle, marked
// with the session revisions its entries wrote.
func (b *bundleRun) response() (*bus.Response, error) {
	typ := "batch-response"
	if b.tx {
		typ = "transaction-response"
	}
	body, err := json.Marshal(map[string]any{"resourceType": "Bundle", "type": typ, "entry": b.out})
	if err != nil {
		return nil, err
	}
	resp := bus.FHIR(200, body)
	for bucket, rev := range b.sessionRevs {
		resp.WithSession(bucket, rev) // only the memberships bucket is written here
	}
	return resp, nil
}

// rewriteRefs points a transaction entry's references to earlier creates'
// urn:uuid fullUrls at what they created. Only whole JSON strings are
// replaced: a urn inside a longer string stays.
func rewriteRefs(resource json.RawMessage, refs map[string]string) json.RawMessage {
	if len(refs) == 0 || len(resource) == 0 {
		return resource
	}
	body := string(resource)
	for urn, ref := range refs {
		body = strings.ReplaceAll(body, `"`+urn+`"`, `"`+ref+`"`)
	}
	return json.RawMessage(body)
}

// outcomeEntry answers an entry with an error's status and outcome.
func outcomeEntry(fe *fhir.Error) responseEntry {
	return responseEntry{Response: entryResponse{Status: statusLine(fe.Status), Outcome: fe.JSON()}}
}

// failedEntry answers a failed batch entry with its outcome, and returns
// the room left. An outcome longer than its reserve takes room; one that
// no longer fits (a long list of validation issues) is replaced by a
// short one.
func failedEntry(fe *fhir.Error, room int) (responseEntry, int) {
	o := fe.JSON()
	switch {
	case len(o) <= entryReserve:
	case len(o)-entryReserve <= room:
		room -= len(o) - entryReserve
	default:
		o = fhir.BadRequest("Entry failed; its outcome is too large to include in the batch's answer").JSON()
	}
	return responseEntry{Response: entryResponse{Status: statusLine(fe.Status), Outcome: o}}, room
}

// answeredEntry answers an entry that ran with its status, version
// headers and, while it fits, its resource; and returns the room left. A
// read whose resource does not fit is answered 413 instead.
func answeredEntry(resp *bus.Response, read bool, room int) (responseEntry, int) {
	re := responseEntry{Response: entryResponse{
		Status: statusLine(resp.Status), Location: resp.Header["Location"],
		Etag: resp.Header["ETag"], LastModified: resp.Header["Last-Modified"],
	}}
	switch {
	case len(resp.Body) <= room:
		room -= len(resp.Body)
		if len(resp.Body) > 0 {
			re.Resource = resp.Body
		}
	case read:
		re = tooLargeEntry()
	}
	return re, room
}

// createdRef is the Type/id a 201 answer created, "" for any other answer.
func createdRef(resp *bus.Response) string {
	if resp.Status != 201 {
		return ""
	}
	var res struct {
		ResourceType, ID string
	}
	if json.Unmarshal(resp.Body, &res) != nil || res.ID == "" {
		return ""
	}
	return res.ResourceType + "/" + res.ID
}

func statusLine(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) }

// runEntry dispatches one entry to the handler its request names.
// A create may be given its id (assigned; "" lets the handler choose).
func (s *Service) runEntry(ctx context.Context, r *bus.Request, e batchEntry, assigned string) (*bus.Response, error) {
	if e.Request == nil || e.Request.URL == "" {
		return nil, fhir.BadRequest("Entry has no request", "entry.request")
	}
	method := strings.ToUpper(e.Request.Method)
	rel := entryPath(s.cfg.BaseURL, e)
	// The same route table as a bot's calls; within a batch only the
	// resource interactions of this service (no nested batch) apply.
	route, params, q, query, ok := bus.FHIRRoute(method, rel)
	h := s.handlers[route.Pattern()]
	if !ok || h == nil || route.Pattern() == "POST /fhir/R4" {
		return nil, fhir.BadRequest("Unsupported entry request: "+method+" "+e.Request.URL, "entry.request")
	}
	if assigned != "" && route.Pattern() == "POST /fhir/R4/:type" {
		params["id"] = assigned
	}
	path, _, _ := strings.Cut(strings.TrimPrefix(rel, "/"), "?")
	sub := &bus.Request{
		Method: method, Path: "/fhir/R4/" + path, Query: q, RawQuery: query,
		Params: params, Body: e.Resource, Principal: r.Principal, RequestID: r.RequestID,
		Header: map[string]string{"Content-Type": "application/fhir+json"},
	}
	if e.Request.IfMatch != "" {
		sub.Header["If-Match"] = e.Request.IfMatch
	}
	if e.Request.IfNoneExist != "" {
		sub.Header["If-None-Exist"] = e.Request.IfNoneExist
	}
	if route.Method == "PATCH" {
		ops, err := patchEntryBody(e.Resource)
		if err != nil {
			return nil, err
		}
		sub.Body = ops
		sub.Header["Content-Type"] = "application/json-patch+json"
	}
	return h(ctx, sub)
}

// patchEntryBody is the JSON Patch of a patch entry, which travels in a
// batch as a Binary holding it base64-encoded.
func patchEntryBody(resource json.RawMessage) ([]byte, error) {
	var bin struct {
		ResourceType string `json:"resourceType"`
		Data         string `json:"data"`
	}
	if json.Unmarshal(resource, &bin) != nil || bin.ResourceType != "Binary" {
		return nil, fhir.BadRequest("A patch entry needs a Binary resource with the JSON Patch", "entry.resource")
	}
	ops, err := base64.StdEncoding.DecodeString(bin.Data)
	if err != nil {
		return nil, fhir.BadRequest("Invalid Binary data", "entry.resource.data")
	}
	return ops, nil
}

// touchesSessions reports whether a bundle writes one of sessionTypes.
func touchesSessions(base string, entries []batchEntry) bool {
	for _, e := range entries {
		if e.Request == nil || e.isMethod("GET") {
			continue
		}
		if sessionTypes[entryType(base, e)] {
			return true
		}
	}
	return false
}

// entryPath is an entry's URL relative to the FHIR base.
func entryPath(base string, e batchEntry) string {
	return strings.TrimPrefix(e.Request.URL, base+"fhir/R4/")
}

// entryType is the resource type an entry's URL names.
func entryType(base string, e batchEntry) string {
	typ, _, _ := strings.Cut(strings.TrimPrefix(entryPath(base, e), "/"), "/")
	typ, _, _ = strings.Cut(typ, "?")
	return typ
}

// commitMargin is the time a transaction must have left to commit: its
// answer still has to reach the gateway before the caller's deadline.
const commitMargin = 100 * time.Millisecond

// undoTimeout bounds the deletes that undo a failed transaction. They run
// on a context of their own: a transaction that failed because its
// deadline passed must still be undone.
const undoTimeout = time.Minute

// undo deletes what a failed transaction created. The server undoes its
// own writes, so the caller's policy (which may grant no delete) is not
// asked: the ids are the transaction's own creates, nobody else's.
func (s *Service) undo(ctx context.Context, created []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for _, ref := range created {
		if t, id, ok := fhir.SplitReference(ref); ok {
			if err := s.repo.Delete(ctx, repo.AllProjects, t, id); err != nil && !fhir.Missing(err) {
				s.log.Warn("undo transaction create", "ref", ref, "err", err)
			}
		}
	}
}
