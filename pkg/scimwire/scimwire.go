// Package scimwire holds what the gateway and the membership service share
// of SCIM 2.0 on the wire (RFC 7643, RFC 7644): its media type, its path
// and its error envelope, so that a refusal on /scim/v2 is written one way
// whether the gateway (a missing token, a body too large) or the service
// (a bad filter) refuses. The SCIM resources themselves are the membership
// service's (services/membership/scimproto).
package scimwire

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// ContentType is SCIM's media type (RFC 7644 §8.1).
const ContentType = "application/scim+json"

// PathPrefix is where SCIM is served; errors under it are SCIM errors.
const PathPrefix = "/scim/"

// ErrorSchema names a SCIM error response (RFC 7644 §3.12).
const ErrorSchema = "urn:ietf:params:scim:api:messages:2.0:Error"

// scimType values RFC 7644 §3.12 defines for 400 and 409.
const (
	InvalidFilter = "invalidFilter"
	TooMany       = "tooMany"
	Uniqueness    = "uniqueness"
	Mutability    = "mutability"
	InvalidSyntax = "invalidSyntax"
	InvalidPath   = "invalidPath"
	NoTarget      = "noTarget"
	InvalidValue  = "invalidValue"
)

// Error is a SCIM error: its HTTP status, the scimType RFC 7644 defines
// for it (none for most statuses), and a detail for people.
type Error struct {
	Status   int
	ScimType string
	Detail   string
	// Header carries response headers (WWW-Authenticate on a 401).
	Header map[string]string
}

func (e *Error) Error() string { return e.Detail }

// New is a SCIM error.
func New(status int, scimType, detail string) *Error {
	return &Error{Status: status, ScimType: scimType, Detail: detail}
}

// BadRequest is a 400 of the given scimType.
func BadRequest(scimType, detail string) *Error { return New(400, scimType, detail) }

// JSON is the error's body: the status is a string, as RFC 7644 §3.12 has it.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(struct {
		Schemas  []string `json:"schemas"`
		Status   string   `json:"status"`
		ScimType string   `json:"scimType,omitempty"`
		Detail   string   `json:"detail,omitempty"`
	}{[]string{ErrorSchema}, strconv.Itoa(e.Status), e.ScimType, e.Detail})
	return b
}

// From turns any error into a SCIM error: a SCIM error as it is, an
// OperationOutcome with its status and text (a 409 is a uniqueness
// conflict, the only kind the membership writes make), anything else a 500.
func From(err error) *Error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	fe := fhir.AsError(err)
	out := &Error{Status: fe.Status, Detail: fe.Message(), Header: fe.Header}
	switch fe.Status {
	case 409:
		out.ScimType = Uniqueness
	case 400:
		out.ScimType = InvalidValue
	}
	return out
}
