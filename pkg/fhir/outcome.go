// Package fhir holds the FHIR shapes every Pinion component shares: the one
// error type (an HTTP status plus an OperationOutcome), Bundles, references
// and the small helpers around resource JSON.
package fhir

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Issue is one OperationOutcome.issue.
type Issue struct {
	Severity    string   `json:"severity"`
	Code        string   `json:"code"`
	Details     *Text    `json:"details,omitempty"`
	Diagnostics string   `json:"diagnostics,omitempty"`
	Expression  []string `json:"expression,omitempty"`
}

// Text is a CodeableConcept reduced to its text, as OperationOutcome uses it.
type Text struct {
	Text string `json:"text"`
}

// OperationOutcome is the FHIR resource every error and bare success is sent as.
type OperationOutcome struct {
	ResourceType string  `json:"resourceType"`
	ID           string  `json:"id,omitempty"`
	Issue        []Issue `json:"issue"`
}

// Error is the one error type of the product: an HTTP status and the
// OperationOutcome that explains it. Handlers return it; the edge writes it.
type Error struct {
	Status  int
	Outcome OperationOutcome
	// Header holds extra response headers (for example WWW-Authenticate).
	Header map[string]string
}

func (e *Error) Error() string {
	if len(e.Outcome.Issue) == 0 {
		return http.StatusText(e.Status)
	}
	i := e.Outcome.Issue[0]
	msg := i.Diagnostics
	if i.Details != nil {
		msg = i.Details.Text
	}
	if len(i.Expression) > 0 {
		return fmt.Sprintf("%d %s (%s)", e.Status, msg, i.Expression[0])
	}
	return fmt.Sprintf("%d %s", e.Status, msg)
}

// Kind is a class of failure for errors.Is: every *Error is the Kind of its
// status, so callers ask "was it missing?" rather than read status numbers.
type Kind int

func (k Kind) Error() string { return http.StatusText(int(k)) }

// The kinds callers branch on.
const (
	ErrBadRequest         Kind = 400
	ErrUnauthorized       Kind = 401
	ErrForbidden          Kind = 403
	ErrNotFound           Kind = 404
	ErrConflict           Kind = 409
	ErrGone               Kind = 410
	ErrPreconditionFailed Kind = 412
)

// Is reports whether target is the Kind of e's status.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && int(k) == e.Status
}

// Missing reports whether err says a resource is not there: not found, or
// deleted.
func Missing(err error) bool { return errors.Is(err, ErrNotFound) || errors.Is(err, ErrGone) }

// JSON encodes the outcome.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(e.Outcome)
	return b
}

// Message is the details text of the first issue.
func (e *Error) Message() string {
	if len(e.Outcome.Issue) == 0 || e.Outcome.Issue[0].Details == nil {
		return ""
	}
	return e.Outcome.Issue[0].Details.Text
}

func outcome(status int, id, severity, code, text string) *Error {
	return &Error{Status: status, Outcome: OperationOutcome{
		ResourceType: "OperationOutcome",
		ID:           id,
		Issue:        []Issue{{Severity: severity, Code: code, Details: &Text{Text: text}}},
	}}
}

// AllOK is Medplum's "All OK" outcome, the body of a success with nothing
// else to return (bus.OK). Successes are not Errors.
func AllOK() OperationOutcome {
	return outcome(200, "ok", "information", "informational", "All OK").Outcome
}

// AcceptedOutcome is the outcome of a 202 (bus.Accepted): url, where the
// work is polled, goes to diagnostics, as Medplum does.
func AcceptedOutcome(url string) OperationOutcome {
	o := outcome(202, "accepted", "information", "informational", "Accepted").Outcome
	o.Issue[0].Diagnostics = url
	return o
}

// Unauthorized is 401.
func Unauthorized() *Error { return outcome(401, "unauthorized", "error", "login", "Unauthorized") }

// Forbidden is 403.
func Forbidden() *Error { return outcome(403, "forbidden", "error", "forbidden", "Forbidden") }

// ForbiddenText is 403 saying why.
func ForbiddenText(msg string) *Error { return outcome(403, "forbidden", "error", "forbidden", msg) }

// AddressNotAllowed is 403 for a request from an address the caller's
// access policy blocks (Medplum's text).
func AddressNotAllowed() *Error { return ForbiddenText("IP address not allowed") }

// NotFound is 404.
func NotFound() *Error { return outcome(404, "not-found", "error", "not-found", "Not found") }

// Conflict is 409 with a message.
func Conflict(msg string) *Error { return outcome(409, "conflict", "error", "conflict", msg) }

// Gone is 410, for deleted resources.
func Gone() *Error { return outcome(410, "gone", "error", "deleted", "Gone") }

// PreconditionFailed is 412.
func PreconditionFailed() *Error {
	return outcome(412, "precondition-failed", "error", "processing", "Precondition Failed")
}

// MultipleMatches is 412 for a lookup that found more than one resource.
func MultipleMatches() *Error {
	return outcome(412, "multiple-matches", "error", "multiple-matches", "Multiple resources found matching condition")
}

// TooLarge is 413.
func TooLarge(msg string) *Error {
	return outcome(413, "content-too-large", "error", "too-long", msg)
}

// HeadersTooLarge is 431: the request's headers exceed what the server reads.
func HeadersTooLarge() *Error {
	return outcome(431, "", "error", "too-long", "Request headers too large")
}

// UpgradeRequired is 426: the route speaks only WebSocket.
func UpgradeRequired() *Error {
	return outcome(426, "", "error", "not-supported", "WebSocket upgrade required")
}

// UnsupportedMediaType is 415.
func UnsupportedMediaType() *Error {
	return outcome(415, "unsupported-media-type", "error", "not-supported", "Unsupported media type")
}

// TooManyRequests is 429.
func TooManyRequests() *Error {
	return outcome(429, "too-many-requests", "error", "throttled", "Too Many Requests")
}

// Timeout is 504: a service did not answer in time.
func Timeout(msg string) *Error {
	if msg == "" {
		msg = "Server timeout"
	}
	return outcome(504, "server-timeout", "error", "timeout", msg)
}

// Unavailable is 503: no service instance is there to answer.
func Unavailable(msg string) *Error {
	return outcome(503, "unavailable", "error", "transient", msg)
}

// Busy is 503 with Retry-After: the service is at its bound for work in
// flight and refuses more rather than queue it without limit.
func Busy(msg string) *Error {
	e := Unavailable(msg)
	e.Header = map[string]string{"Retry-After": "1"}
	return e
}

// BadRequest is 400 for bad input; expr names the offending field when known.
func BadRequest(msg string, expr ...string) *Error {
	e := outcome(400, "", "error", "invalid", msg)
	if len(expr) > 0 && expr[0] != "" {
		e.Outcome.Issue[0].Expression = expr
	}
	return e
}

// Invalid is 400 with one issue per field, as request validation reports it.
func Invalid(issues ...Issue) *Error {
	return &Error{Status: 400, Outcome: OperationOutcome{ResourceType: "OperationOutcome", Issue: issues}}
}

// FieldIssue is one invalid-input issue naming its field.
func FieldIssue(expr, msg string) Issue {
	i := Issue{Severity: "error", Code: "invalid", Details: &Text{Text: msg}}
	if expr != "" {
		i.Expression = []string{expr}
	}
	return i
}

// Internal is 500; the cause is logged by the caller, never sent.
func Internal() *Error {
	return outcome(500, "", "error", "exception", "Internal server error")
}

// AsError maps any error to an *Error: an *Error (possibly wrapped) keeps its
// status; anything else is a 500 that reveals nothing.
func AsError(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return Internal()
}

// StatusOf reads the HTTP status an OperationOutcome stands for, by its id,
// the way Medplum's client and server do.
func StatusOf(o *OperationOutcome) int {
	switch o.ID {
	case "ok":
		return 200
	case "created":
		return 201
	case "accepted":
		return 202
	case "not-modified":
		return 304
	case "unauthorized":
		return 401
	case "forbidden":
		return 403
	case "not-found":
		return 404
	case "conflict":
		return 409
	case "gone":
		return 410
	case "precondition-failed", "multiple-matches":
		return 412
	case "content-too-large":
		return 413
	case "unsupported-media-type":
		return 415
	case "business-rule":
		return 422
	case "too-many-requests":
		return 429
	case "server-timeout":
		return 504
	}
	if len(o.Issue) > 0 && o.Issue[0].Code == "exception" {
		return 500
	}
	return 400
}
