// Package bus is the one place that knows how an HTTP request travels over
// NATS: the envelope (request and response as NATS messages), the service
// subjects, connecting, and serving endpoints as nats.go micro services.
package bus

import (
	"encoding/json"
	"mime"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Header names of the envelope. HTTP headers a service may need travel as
// "H-<canonical name>"; everything else is Pinion's own.
const (
	hMethod    = "Pinion-Method"
	hPath      = "Pinion-Path"
	hQuery     = "Pinion-Query"
	hParams    = "Pinion-Params"
	hPrincipal = "Pinion-Principal"
	hRequestID = "Pinion-Request-Id"
	hRemote    = "Pinion-Remote-Addr"
	hStatus    = "Pinion-Status"
	hBotDepth  = "Pinion-Bot-Depth"
	hHTTP      = "H-"
	// TraceParent is the W3C trace context header, carried as is.
	TraceParent = "traceparent"
)

// ForwardedHeaders are the HTTP request headers the gateway passes on.
var ForwardedHeaders = []string{
	"Content-Type", "Accept", "If-Match", "If-None-Exist", "If-None-Match",
	"Prefer", "Authorization", "Origin", "X-Medplum", "User-Agent", "Cookie",
}

// Principal is who makes a request, as the gateway verified it. Services
// trust it because only the gateway may publish on service subjects.
type Principal struct {
	LoginID      string `json:"login"`
	TokenID      string `json:"jti,omitempty"`
	User         string `json:"user"`    // User/<id> or ClientApplication/<id> or Bot/<id>
	Profile      string `json:"profile"` // e.g. Practitioner/<id>
	Project      string `json:"project"` // project id
	Membership   string `json:"membership"`
	ClientID     string `json:"client,omitempty"`
	Scope        string `json:"scope,omitempty"`
	Admin        bool   `json:"admin,omitempty"`
	SuperAdmin   bool   `json:"superAdmin,omitempty"`
	AccessPolicy bool   `json:"accessPolicy,omitempty"` // the membership names at least one policy
	// Patient is the id of the patient in the token's SMART launch
	// context: its patient/ scopes reach that patient's compartment.
	Patient string `json:"patient,omitempty"`
}

// Request is an HTTP request as a service sees it.
type Request struct {
	Method    string
	Path      string            // URL path, e.g. /fhir/R4/Patient/123
	Query     url.Values        // decoded query
	RawQuery  string            // the query as sent
	Params    map[string]string // route parameters, e.g. type and id
	Header    map[string]string // forwarded HTTP headers, canonical names
	Body      []byte
	Principal *Principal // nil for anonymous requests
	RequestID string
	Remote    string // client IP
	Trace     string // traceparent
	// BotDepth counts the bots in the chain of calls that made this
	// request: 0 from the gateway, 1 from a bot's medplum client, 2 from a
	// bot run by that bot, and so on.
	BotDepth int
}

// Param returns a route parameter.
func (r *Request) Param(name string) string { return r.Params[name] }

// Get returns a forwarded HTTP header.
func (r *Request) Get(name string) string { return r.Header[name] }

// Response is what a service answers.
type Response struct {
	Status int
	Header map[string]string
	Body   []byte
}

// SessionHeader names a session-bucket revision a response depends on
// ("<bucket>=<revision>"); the gateway waits for its view to reach it and
// strips the header.
const SessionHeader = "Pinion-Session"

// WithSession marks a response as depending on a session write.
func (r *Response) WithSession(bucket string, rev uint64) *Response {
	if r.Header == nil {
		r.Header = map[string]string{}
	}
	r.Header[SessionHeader] = bucket + "=" + strconv.FormatUint(rev, 10)
	return r
}

// Session reads the session revision a response depends on, if any.
func (r *Response) Session() (bucket string, rev uint64, ok bool) {
	dep, found := r.Header[SessionHeader]
	if !found {
		return "", 0, false
	}
	bucket, revText, _ := strings.Cut(dep, "=")
	rev, err := strconv.ParseUint(revText, 10, 64)
	return bucket, rev, err == nil
}

// FHIRContentType is the content type of every FHIR JSON response.
const FHIRContentType = "application/fhir+json; charset=utf-8"

// JSONContentType is for plain JSON answers (OAuth endpoints, admin extras).
const JSONContentType = "application/json; charset=utf-8"

// FHIR makes a FHIR JSON response with the given status.
func FHIR(status int, body []byte) *Response {
	return &Response{Status: status, Header: map[string]string{"Content-Type": FHIRContentType}, Body: body}
}

// JSON marshals v as a plain JSON response.
func JSON(status int, v any) *Response {
	b, err := json.Marshal(v)
	if err != nil {
		return Outcome(fhir.Internal())
	}
	return &Response{Status: status, Header: map[string]string{"Content-Type": JSONContentType}, Body: b}
}

// Outcome turns an error into its OperationOutcome response.
func Outcome(e *fhir.Error) *Response {
	r := FHIR(e.Status, e.JSON())
	for k, v := range e.Header {
		r.Header[k] = v
	}
	return r
}

// OK is 200 with the All OK outcome: a success with nothing to return.
func OK() *Response {
	b, _ := json.Marshal(fhir.AllOK())
	return FHIR(200, b)
}

// Accepted is 202 for work to poll at url, which Content-Location and the
// outcome's diagnostics name, as Medplum answers.
func Accepted(url string) *Response {
	b, _ := json.Marshal(fhir.AcceptedOutcome(url))
	r := FHIR(202, b)
	r.Header["Content-Location"] = url
	return r
}

// EncodeRequest builds the NATS message for a request on subject.
func EncodeRequest(subject string, r *Request) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = r.Body
	h := m.Header
	h.Set(hMethod, r.Method)
	h.Set(hPath, r.Path)
	if r.RawQuery != "" {
		h.Set(hQuery, r.RawQuery)
	}
	if len(r.Params) > 0 {
		h.Set(hParams, encodeParams(r.Params))
	}
	for k, v := range r.Header {
		h.Set(hHTTP+k, v)
	}
	if r.Principal != nil {
		h.Set(hPrincipal, encodePrincipal(r.Principal))
	}
	if r.RequestID != "" {
		h.Set(hRequestID, r.RequestID)
	}
	if r.Remote != "" {
		h.Set(hRemote, r.Remote)
	}
	if r.Trace != "" {
		h.Set(TraceParent, r.Trace)
	}
	if r.BotDepth > 0 {
		h.Set(hBotDepth, strconv.Itoa(r.BotDepth))
	}
	return m
}

// DecodeRequest reads a request from NATS headers and data.
func DecodeRequest(h nats.Header, data []byte) (*Request, error) {
	r := &Request{
		Method:    h.Get(hMethod),
		Path:      h.Get(hPath),
		RawQuery:  h.Get(hQuery),
		Body:      data,
		RequestID: h.Get(hRequestID),
		Remote:    h.Get(hRemote),
		Trace:     h.Get(TraceParent),
		Header:    map[string]string{},
	}
	q, err := url.ParseQuery(r.RawQuery)
	if err != nil {
		return nil, fhir.BadRequest("Invalid query string: " + err.Error())
	}
	if d := h.Get(hBotDepth); d != "" {
		if r.BotDepth, err = strconv.Atoi(d); err != nil || r.BotDepth < 0 {
			return nil, fhir.BadRequest("Invalid bot depth")
		}
	}
	r.Query = q
	if p := h.Get(hParams); p != "" {
		if r.Params, err = decodeParams(p); err != nil {
			return nil, err
		}
	}
	for k, v := range h {
		if len(k) > len(hHTTP) && k[:len(hHTTP)] == hHTTP && len(v) > 0 {
			r.Header[k[len(hHTTP):]] = v[0]
		}
	}
	if p := h.Get(hPrincipal); p != "" {
		if r.Principal, err = decodePrincipal(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// EncodeResponse writes a response's status and headers into NATS headers.
func EncodeResponse(r *Response) nats.Header {
	h := nats.Header{}
	h.Set(hStatus, strconv.Itoa(r.Status))
	for k, v := range r.Header {
		h.Set(hHTTP+k, v)
	}
	return h
}

// DecodeResponse reads a service's answer.
func DecodeResponse(m *nats.Msg) *Response {
	r := &Response{Header: map[string]string{}, Body: m.Data}
	st, err := strconv.Atoi(m.Header.Get(hStatus))
	if err != nil {
		// A micro framework error (no handler, panic) carries no status.
		return Outcome(fhir.Internal())
	}
	r.Status = st
	for k, v := range m.Header {
		if len(k) > len(hHTTP) && k[:len(hHTTP)] == hHTTP && len(v) > 0 {
			r.Header[k[len(hHTTP):]] = v[0]
		}
	}
	return r
}

// MediaType is the request's Content-Type without its parameters, "" when
// absent or malformed.
func (r *Request) MediaType() string {
	mt, _, err := mime.ParseMediaType(r.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// IsJSON reports a JSON or FHIR JSON body.
func (r *Request) IsJSON() bool {
	mt := r.MediaType()
	return mt == "application/json" || mt == "application/fhir+json"
}

// DecodeJSON decodes a JSON body into v: 415 for another content type,
// 400 "Content could not be parsed" for bad JSON.
func (r *Request) DecodeJSON(v any) error {
	if !r.IsJSON() {
		return fhir.UnsupportedMediaType()
	}
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fhir.BadRequest("Content could not be parsed")
	}
	return nil
}
