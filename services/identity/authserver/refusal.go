package authserver

import (
	"errors"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// Refusal is why the token, revocation or introspection endpoint issues
// nothing: RFC 6749 §5.2's error code, with Medplum's text as its
// description. It is an error, turned into its answer in one place
// (Answer). Each code has its constructor, which says what it means.
type Refusal struct {
	code, text string
	// rev, when set, is the logins bucket revision of the revocation the
	// refusal wrote, which the caller's next request must see.
	rev uint64
}

// InvalidRequest: a parameter is missing, repeated or malformed (400).
func InvalidRequest(text string) *Refusal { return &Refusal{code: "invalid_request", text: text} }

// InvalidClient: the client is unknown, or failed to authenticate, or a
// confidential client did not (401, with a Basic challenge).
func InvalidClient(text string) *Refusal { return &Refusal{code: "invalid_client", text: text} }

// InvalidGrant: the code, refresh token or assertion is bad, spent,
// expired, revoked, or another client's (400).
func InvalidGrant(text string) *Refusal { return &Refusal{code: "invalid_grant", text: text} }

// UnauthorizedClient: the client is who it says, but may not be given
// this (its membership is inactive, its address blocked) (400).
func UnauthorizedClient(text string) *Refusal {
	return &Refusal{code: "unauthorized_client", text: text}
}

// UnsupportedGrantType: no grant of this type is served (400).
func UnsupportedGrantType(text string) *Refusal {
	return &Refusal{code: "unsupported_grant_type", text: text}
}

func (r *Refusal) Error() string { return r.code + ": " + r.text }

// Revoked is the refusal, marked with the revocation it wrote.
func (r *Refusal) Revoked(rev uint64) *Refusal {
	c := *r
	c.rev = rev
	return &c
}

// Response is the refusal's answer: RFC 6749 §5.2's JSON, 401 and a
// Basic challenge for a client that failed to authenticate, 400 for the
// rest, never cached.
func (r *Refusal) Response() *bus.Response {
	status := 400
	if r.code == "invalid_client" {
		status = 401
	}
	resp := bus.JSON(status, map[string]string{"error": r.code, "error_description": r.text})
	if status == 401 {
		resp.Header["WWW-Authenticate"] = `Basic realm="token"`
	}
	resp.Header["Cache-Control"] = "no-store"
	resp.Header["Pragma"] = "no-cache"
	if r.rev > 0 {
		resp.WithSession(session.LoginsBucket, r.rev)
	}
	return resp
}

// Answer is the answer of an OAuth endpoint whose work ended with resp or
// err: a refusal becomes its answer; any other error is the service
// failing (a 5xx); an answer is never cached.
func Answer(resp *bus.Response, err error) (*bus.Response, error) {
	if no := (*Refusal)(nil); errors.As(err, &no) {
		return no.Response(), nil
	}
	if resp != nil {
		resp.Header["Cache-Control"] = "no-store"
		resp.Header["Pragma"] = "no-cache"
	}
	return resp, err
}
