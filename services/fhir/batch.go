package fhir

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

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
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	if _, err := fhir.Decode(r.Body); err != nil {
		return nil, err
	}
	var b struct {
		ResourceType string       `json:"resourceType"`
		Type         string       `json:"type"`
		Entry        []batchEntry `json:"entry"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || b.ResourceType != "Bundle" {
		return nil, fhir.BadRequest("Not a bundle", "resourceType")
	}
	if b.Type != "batch" && b.Type != "transaction" {
		return nil, fhir.BadRequest("Bundle type must be batch or transaction", "type")
	}
	if len(b.Entry) > maxBatchEntries {
		return nil, fhir.TooLarge("A bundle may hold at most " + strconv.Itoa(maxBatchEntries) + " entries")
	}
	tx := b.Type == "transaction"
	out := make([]responseEntry, len(b.Entry))
	// In a transaction, creates run first so later entries can refer to
	// them by their urn:uuid fullUrl.
	order := make([]int, 0, len(b.Entry))
	if tx {
		for i, e := range b.Entry {
			if e.Request != nil && strings.EqualFold(e.Request.Method, "POST") {
				order = append(order, i)
			}
		}
		for i, e := range b.Entry {
			if e.Request == nil || !strings.EqualFold(e.Request.Method, "POST") {
				order = append(order, i)
			}
		}
	} else {
		for i := range b.Entry {
			order = append(order, i)
		}
	}
	refs := map[string]string{} // urn:uuid:… → Type/id
	var created []string
	outer := ctx // without the transaction: undo must really delete
	var txn *repo.Tx
	if tx && !s.touchesSessions(b.Entry) {
		ctx, txn = s.repo.Begin(ctx)
	}
	// The answer must fit on the bus: each entry's status line is reserved
	// up front, and resources are included while they fit. A read that no
	// longer fits is answered 413 (and not run once nothing fits); a write
	// is still done and answered without its resource.
	room := s.replyBudget() - len(b.Entry)*entryReserve
	sessionRevs := map[string]uint64{}
	tooLarge := fhir.TooLarge("Entry not answered: the batch's answer would be too large; read it on its own")
	for _, i := range order {
		e := b.Entry[i]
		read := e.Request != nil && strings.EqualFold(e.Request.Method, "GET")
		if read && room <= 0 {
			out[i] = responseEntry{Response: entryResponse{Status: statusLine(tooLarge.Status), Outcome: tooLarge.JSON()}}
			continue
		}
		if tx && len(refs) > 0 && len(e.Resource) > 0 {
			body := string(e.Resource)
			for urn, ref := range refs {
				body = strings.ReplaceAll(body, `"`+urn+`"`, `"`+ref+`"`)
			}
			e.Resource = json.RawMessage(body)
		}
		assigned := ""
		if tx && e.Request != nil && strings.EqualFold(e.Request.Method, "POST") {
			assigned = uuid.NewString()
		}
		resp, err := s.runEntry(ctx, r, e, assigned)
		if err != nil {
			fe := fhir.AsError(err)
			if tx {
				if assigned != "" {
					// Its outcome is unknown (a deadline may have cut it
					// off after the write): undo it too.
					if typ, _, _ := strings.Cut(strings.TrimPrefix(s.entryPath(e), "/"), "?"); typ != "" {
						created = append(created, typ+"/"+assigned)
					}
				}
				if txn == nil {
					s.undo(outer, created)
				}
				return nil, fe
			}
			o := fe.JSON()
			switch {
			case len(o) <= entryReserve:
			case len(o)-entryReserve <= room:
				room -= len(o) - entryReserve
			default: // a long list of validation issues
				o = fhir.BadRequest("Entry failed; its outcome is too large to include in the batch's answer").JSON()
			}
			out[i] = responseEntry{Response: entryResponse{Status: statusLine(fe.Status), Outcome: o}}
			continue
		}
		// An entry that changed a session: the whole answer waits for it.
		if bucket, rev, ok := resp.Session(); ok && rev > sessionRevs[bucket] {
			sessionRevs[bucket] = rev
		}
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
			re = responseEntry{Response: entryResponse{Status: statusLine(tooLarge.Status), Outcome: tooLarge.JSON()}}
		}
		if resp.Status == 201 {
			var res struct {
				ResourceType, ID string
			}
			if json.Unmarshal(resp.Body, &res) == nil && res.ID != "" {
				created = append(created, res.ResourceType+"/"+res.ID)
				if strings.HasPrefix(e.FullURL, "urn:uuid:") {
					refs[e.FullURL] = res.ResourceType + "/" + res.ID
				}
			}
		}
		out[i] = re
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
			s.undo(outer, created) // a store without transactions may have stored part
			return nil, err
		}
		if ctx.Err() != nil {
			s.undo(outer, created)
			return nil, fhir.Timeout("")
		}
	}
	typ := "batch-response"
	if tx {
		typ = "transaction-response"
	}
	body, err := json.Marshal(map[string]any{"resourceType": "Bundle", "type": typ, "entry": out})
	if err != nil {
		return nil, err
	}
	resp := bus.FHIR(200, body)
	for bucket, rev := range sessionRevs {
		resp.WithSession(bucket, rev) // only the memberships bucket is written here
	}
	return resp, nil
}

func statusLine(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) }

// runEntry dispatches one entry to the handler its request names.
// A create may be given its id (assigned; "" lets the handler choose).
func (s *Service) runEntry(ctx context.Context, r *bus.Request, e batchEntry, assigned string) (*bus.Response, error) {
	if e.Request == nil || e.Request.URL == "" {
		return nil, fhir.BadRequest("Entry has no request", "entry.request")
	}
	method := strings.ToUpper(e.Request.Method)
	rel := s.entryPath(e)
	// The same route table as a bot's calls; within a batch only the
	// resource interactions of this service (no nested batch) apply.
	subject, params, q, query, ok := bus.FHIRRoute(method, rel)
	h := s.handlers[subject]
	if !ok || h == nil || subject == bus.SubjBatch {
		return nil, fhir.BadRequest("Unsupported entry request: "+method+" "+e.Request.URL, "entry.request")
	}
	if assigned != "" && subject == bus.SubjCreate {
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
	if subject == bus.SubjPatch {
		// A patch travels in a batch as a Binary holding the JSON Patch.
		var bin struct {
			ResourceType string `json:"resourceType"`
			Data         string `json:"data"`
		}
		if json.Unmarshal(e.Resource, &bin) != nil || bin.ResourceType != "Binary" {
			return nil, fhir.BadRequest("A patch entry needs a Binary resource with the JSON Patch", "entry.resource")
		}
		ops, err := base64.StdEncoding.DecodeString(bin.Data)
		if err != nil {
			return nil, fhir.BadRequest("Invalid Binary data", "entry.resource.data")
		}
		sub.Body = ops
		sub.Header["Content-Type"] = "application/json-patch+json"
	}
	return h(ctx, sub)
}

// touchesSessions reports whether a bundle writes one of sessionTypes.
func (s *Service) touchesSessions(entries []batchEntry) bool {
	for _, e := range entries {
		if e.Request == nil || strings.EqualFold(e.Request.Method, "GET") {
			continue
		}
		typ, _, _ := strings.Cut(strings.TrimPrefix(s.entryPath(e), "/"), "/")
		typ, _, _ = strings.Cut(typ, "?")
		if sessionTypes[typ] {
			return true
		}
	}
	return false
}

// entryPath is an entry's URL relative to the FHIR base.
func (s *Service) entryPath(e batchEntry) string {
	return strings.TrimPrefix(e.Request.URL, s.cfg.BaseURL+"fhir/R4/")
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
			if err := s.repo.Delete(ctx, repo.System, t, id); err != nil && !fhir.Missing(err) {
				s.log.Warn("undo transaction create", "ref", ref, "err", err)
			}
		}
	}
}
