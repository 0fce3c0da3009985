// Package subscription reads FHIR R4 Subscription resources as Medplum
// uses them: which changes a subscription asks for (criteria, the
// interaction extension) and how each is delivered (a rest-hook to a URL
// or a Bot, its headers, signature, attempts and success codes). It is
// pure: the delivery itself is botexec's.
//
// The extension URLs and their meaning are Medplum 5.0.10's
// (packages/core/src/subscriptions and packages/server/src/workers).
package subscription

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirpath"
	"github.com/pinion-health/pinion/pkg/fhirschema"
	"github.com/pinion-health/pinion/pkg/search"
)

// Medplum's extensions on Subscription.
const (
	ExtInteraction  = "https://medplum.com/fhir/StructureDefinition/subscription-supported-interaction"
	ExtMaxAttempts  = "https://medplum.com/fhir/StructureDefinition/subscription-max-attempts"
	ExtSuccessCodes = "https://medplum.com/fhir/StructureDefinition/subscription-success-codes"
	ExtFHIRPath     = "https://medplum.com/fhir/StructureDefinition/fhir-path-criteria-expression"
	ExtSecret       = "https://www.medplum.com/fhir/StructureDefinition/subscription-secret"
	// extSecretOld is the secret's first URL, which Medplum still reads.
	extSecretOld = "https://www.medplum.com/fhir/StructureDefinition-subscriptionSecret"
	// ExtPreCommit marks a pre-commit bot, which Medplum runs inside the
	// write; the subscription worker ignores it.
	ExtPreCommit = "https://medplum.com/fhir/StructureDefinition/pre-commit-bot"
)

// Retries: Medplum retries a failed delivery max-attempts times (4 unless
// the extension says otherwise) after the first, and never makes more
// than 19 attempts in all.
const (
	DefaultRetries = 4
	MaxAttempts    = 19
)

// Channel types.
const (
	RestHook  = "rest-hook"
	WebSocket = "websocket"
)

// Interactions a change can be.
const (
	Create = "create"
	Update = "update"
	Delete = "delete"
)

// Subscription is a stored Subscription as delivery needs it.
type Subscription struct {
	ID, Project string
	// Written is when this version was stored, if its reader says.
	Written time.Time
	// Author is meta.author: whose access to a changed resource decides
	// whether the subscription may see it.
	Author string
	Active bool
	// Type is the resource type the criteria search.
	Type  string
	query *search.Query
	// Interaction is the one interaction asked for ("" for every one).
	Interaction string
	Channel     string
	// Endpoint is a URL, "Bot/<id>" or "Bot?identifier=<system>|<value>".
	Endpoint string
	// Headers are channel.header, each "Name: value".
	Headers [][2]string
	Secret  string
	// Retries is how many times a failed delivery is tried again.
	Retries int
	// successCodes is the success-codes extension as written ("" for
	// 200–399).
	successCodes string
	preCommit    bool
	// fhirPath is the fhir-path-criteria-expression, which must be true of
	// %current and %previous.
	fhirPath *fhirpath.Expr
}

type document struct {
	Status   string `json:"status"`
	Criteria string `json:"criteria"`
	Meta     struct {
		Author struct {
			Reference string `json:"reference"`
		} `json:"author"`
	} `json:"meta"`
	Channel struct {
		Type     string   `json:"type"`
		Endpoint string   `json:"endpoint"`
		Header   []string `json:"header"`
	} `json:"channel"`
	Extension []extension `json:"extension"`
}

type extension struct {
	URL          string      `json:"url"`
	ValueCode    string      `json:"valueCode"`
	ValueString  string      `json:"valueString"`
	ValueInteger json.Number `json:"valueInteger"`
	ValueBoolean bool        `json:"valueBoolean"`
}

// Bounds of a rest-hook's own headers, sent with every delivery: Medplum
// sets none, and a header block of megabytes would cost every attempt.
const (
	MaxHeaders     = 64
	maxHeaderBytes = 8 << 10
)

// Parse reads a stored Subscription. Its errors are 400s naming the
// element at fault, so Check can refuse the write that would store one.
func Parse(id, project string, body []byte) (*Subscription, error) {
	var d document
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fhir.BadRequest("Invalid Subscription: " + err.Error())
	}
	s := &Subscription{
		ID: id, Project: project, Author: d.Meta.Author.Reference,
		Active: d.Status == "active", Channel: d.Channel.Type, Endpoint: d.Channel.Endpoint,
		Retries: DefaultRetries,
	}
	var err error
	if s.Type, s.query, err = parseCriteria(d.Criteria); err != nil {
		return nil, err
	}
	if len(d.Channel.Header) > MaxHeaders {
		return nil, fhir.BadRequest(fmt.Sprintf("At most %d channel headers", MaxHeaders), "Subscription.channel.header")
	}
	for i, h := range d.Channel.Header {
		if len(h) > maxHeaderBytes {
			return nil, fhir.BadRequest(fmt.Sprintf("A channel header is at most %d bytes", maxHeaderBytes), fmt.Sprintf("Subscription.channel.header[%d]", i))
		}
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
			return nil, fhir.BadRequest("A channel header is written \"Name: value\"", fmt.Sprintf("Subscription.channel.header[%d]", i))
		}
		s.Headers = append(s.Headers, [2]string{name, value})
	}
	for i, e := range d.Extension {
		switch e.URL {
		case ExtInteraction:
			switch e.ValueCode {
			case Create, Update, Delete:
				s.Interaction = e.ValueCode
			default:
				return nil, fhir.BadRequest("The supported interaction is create, update or delete", "Subscription.extension")
			}
		case ExtMaxAttempts:
			if e.ValueInteger == "" {
				continue // Medplum's default applies
			}
			n, err := strconv.Atoi(e.ValueInteger.String())
			if err != nil || n < 0 {
				return nil, fhir.BadRequest("subscription-max-attempts is a whole number, 0 or more", "Subscription.extension")
			}
			s.Retries = min(n, MaxAttempts-1)
		case ExtSuccessCodes:
			if _, err := successful(e.ValueString, 200); err != nil {
				return nil, fhir.BadRequest("subscription-success-codes: "+err.Error(), "Subscription.extension")
			}
			s.successCodes = e.ValueString
		case ExtSecret, extSecretOld:
			if s.Secret == "" || e.URL == ExtSecret {
				s.Secret = e.ValueString
			}
		case ExtFHIRPath:
			if e.ValueString == "" {
				continue
			}
			if s.fhirPath, err = fhirpath.Parse(e.ValueString); err != nil {
				return nil, fhir.BadRequest("fhir-path-criteria-expression: "+err.Error(), fmt.Sprintf("Subscription.extension[%d].valueString", i))
			}
		case ExtPreCommit:
			s.preCommit = e.ValueBoolean
		}
	}
	return s, nil
}

// Check refuses a Subscription that could never be delivered: criteria
// that do not parse as a search of a known type, FHIRPath criteria beyond
// what pkg/fhirpath evaluates, a rest-hook without an endpoint or with one
// that is neither an http(s) URL nor a Bot, a malformed header or
// extension. Medplum stores such a subscription and
// skips it at every change; here the write is refused, saying why.
func Check(res map[string]any) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fhir.BadRequest("Invalid Subscription")
	}
	s, err := Parse("", "", b)
	if err != nil {
		return err
	}
	switch s.Channel {
	case RestHook:
		if s.Endpoint == "" {
			return fhir.BadRequest("A rest-hook subscription needs channel.endpoint", "Subscription.channel.endpoint")
		}
		if _, ok := s.Bot(); ok {
			return nil
		}
		if strings.HasPrefix(s.Endpoint, "Bot?") {
			if _, ok := s.BotIdentifier(); !ok {
				return fhir.BadRequest("A bot endpoint by identifier is Bot?identifier=<system>|<value>", "Subscription.channel.endpoint")
			}
			return nil
		}
		u, err := url.Parse(s.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fhir.BadRequest("channel.endpoint is an http(s) URL or Bot/<id> (or Bot?identifier=<system>|<value>)", "Subscription.channel.endpoint")
		}
	case WebSocket:
	default:
		return fhir.BadRequest("Supported channel types are rest-hook and websocket", "Subscription.channel.type")
	}
	return nil
}

// Criteria is a Subscription's search criteria, parsed: its resource type
// and query, for a check of what its matches would reveal
// (pkg/writerules refuses criteria on a field the writer's policy hides).
func Criteria(res map[string]any) (string, *search.Query, error) {
	c, _ := res["criteria"].(string)
	return parseCriteria(c)
}

// parseCriteria reads "Type" or "Type?search" with the API's search code.
func parseCriteria(criteria string) (string, *search.Query, error) {
	const expr = "Subscription.criteria"
	typ, rawQuery, _ := strings.Cut(strings.TrimSpace(criteria), "?")
	if typ == "" {
		return "", nil, fhir.BadRequest("Subscription criteria are required", expr)
	}
	if !fhirschema.IsResourceType(typ) {
		return "", nil, fhir.BadRequest("Unknown resource type in criteria: "+typ, expr)
	}
	vals, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, fhir.BadRequest("Invalid criteria: "+err.Error(), expr)
	}
	q, err := search.Parse(typ, vals)
	if err != nil {
		return "", nil, fhir.BadRequest("Invalid criteria: "+fhir.AsError(err).Message(), expr)
	}
	return typ, q, nil
}

// Bot is the bot id when the endpoint names one.
func (s *Subscription) Bot() (string, bool) {
	id, ok := strings.CutPrefix(s.Endpoint, "Bot/")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// BotIdentifier is the identifier when the endpoint names a bot by one
// (Bot?identifier=<system>|<value>, medplum#6029), resolved at each
// delivery as $execute?identifier= resolves it.
func (s *Subscription) BotIdentifier() (string, bool) {
	q, ok := strings.CutPrefix(s.Endpoint, "Bot?")
	if !ok {
		return "", false
	}
	v, err := url.ParseQuery(q)
	if err != nil || len(v) != 1 || len(v["identifier"]) != 1 {
		return "", false
	}
	ident := v.Get("identifier")
	return ident, ident != "" && !strings.HasSuffix(ident, "|")
}

// Delivered reports whether a change is one to deliver through this
// subscription's rest-hook: an active rest-hook subscription (not a
// pre-commit bot) whose criteria and interaction the changed resource meets.
// AuditEvents are never delivered, as in Medplum. FHIRPath criteria that
// spend their default budget do not match.
func (s *Subscription) Delivered(interaction string, d *search.Doc, previous func() map[string]any) bool {
	r, _ := s.Route(context.Background(), interaction, d, previous)
	return r == ByRestHook
}

// Deliverable reports whether changes are delivered through this
// subscription's rest-hook at all: an active rest-hook subscription with
// an endpoint, not a pre-commit bot. The deliverer asks again before each
// attempt, as the subscription may have changed since the match.
func (s *Subscription) Deliverable() bool {
	return s.Active && !s.preCommit && s.Channel == RestHook && s.Endpoint != ""
}

// Notified reports whether a change is one to send to the sockets bound to
// this WebSocket subscription.
func (s *Subscription) Notified(interaction string, d *search.Doc, previous func() map[string]any) bool {
	r, _ := s.Route(context.Background(), interaction, d, previous)
	return r == BySocket
}

// Routing is the way a change takes to a subscription.
type Routing int

// Routings.
const (
	// NotRouted: the change is not the subscription's.
	NotRouted Routing = iota
	// ByRestHook: the change is delivered to the rest-hook.
	ByRestHook
	// BySocket: the change is sent to the sockets bound.
	BySocket
)

// Route is how a change reaches this subscription: by its rest-hook (see
// Delivered), by its sockets (see Notified), or not at all. FHIRPath
// criteria are evaluated within ctx and fhirpath's default budget; when
// they spend it the change is not routed and the error wraps
// fhirpath.ErrBudget.
func (s *Subscription) Route(ctx context.Context, interaction string, d *search.Doc, previous func() map[string]any) (Routing, error) {
	var r Routing
	switch {
	case d.Type == "AuditEvent":
		return NotRouted, nil
	case s.Deliverable():
		r = ByRestHook
	case s.Active && s.Channel == WebSocket:
		r = BySocket
	default:
		return NotRouted, nil
	}
	ok, err := s.MatchesWithin(ctx, interaction, d, previous)
	if err != nil || !ok {
		return NotRouted, err
	}
	return r, nil
}

// HasFHIRPath reports whether the subscription has FHIRPath criteria,
// whose evaluation has a cost.
func (s *Subscription) HasFHIRPath() bool { return s.fhirPath != nil }

// Matches reports whether a change meets the criteria, the FHIRPath
// criteria and the interaction. previous gives the version before the
// change ({} for a create), read only when FHIRPath criteria need it.
func (s *Subscription) Matches(interaction string, d *search.Doc, previous func() map[string]any) bool {
	ok, _ := s.MatchesWithin(context.Background(), interaction, d, previous)
	return ok
}

// MatchesWithin is Matches with the FHIRPath criteria evaluated within
// ctx and their budget: an error wrapping fhirpath.ErrBudget when spent.
func (s *Subscription) MatchesWithin(ctx context.Context, interaction string, d *search.Doc, previous func() map[string]any) (bool, error) {
	if d.Type != s.Type {
		return false, nil
	}
	if s.Interaction != "" && s.Interaction != interaction {
		return false, nil
	}
	if !s.query.Matches(d) {
		return false, nil
	}
	if s.fhirPath == nil {
		return true, nil
	}
	cur, err := d.Content()
	if err != nil {
		return false, nil
	}
	return s.fhirPath.IsTrue(ctx, cur, map[string]any{"current": cur, "previous": previous()}, fhirpath.Budget{})
}

// Successful reports whether an endpoint's status counts as delivered:
// 200–399 unless the success-codes extension lists codes and ranges.
func (s *Subscription) Successful(status int) bool {
	ok, _ := successful(s.successCodes, status)
	return ok
}

// successful reads "200-299, 304" style lists. Medplum falls back to
// 200–399 when an entry is not a number; such a list is refused at write.
func successful(codes string, status int) (bool, error) {
	codes = strings.ReplaceAll(codes, " ", "")
	if codes == "" {
		return status >= 200 && status < 400, nil
	}
	for _, c := range strings.Split(codes, ",") {
		lo, hi, isRange := strings.Cut(c, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return status >= 200 && status < 400, fmt.Errorf("%q is not a status code", c)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return status >= 200 && status < 400, fmt.Errorf("%q is not a range of status codes", c)
			}
		}
		if status >= a && status <= b {
			return true, nil
		}
	}
	return false, nil
}

// Signature is X-Signature: the hex HMAC-SHA256 of the body sent, keyed
// with the subscription's secret.
func Signature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
