package bus

import (
	"strings"

	"github.com/pinion-health/pinion/pkg/bus/internal/pattern"
)

// Endpoint is one thing a service answers. Route is "METHOD /path" with
// :name segments (the gateway's syntax), or, for an Internal endpoint, the
// NATS subject itself.
type Endpoint struct {
	Route   string
	Auth    AuthMode
	Handler Handler
}

// Handle declares an endpoint on one line beside its handler, net/http
// style:
//
//	bus.Handle("POST /admin/projects/:projectId/invite", bus.Token, s.invite)
//
// The services' calls of Handle are the source of the HTTP table:
// `go generate ./bus/` reads them (with go/ast) into Routes
// (routes_gen.go), which the gateway, batches and bots use without linking
// the services. So route and auth must be written out as literals there.
func Handle(route string, auth AuthMode, h Handler) Endpoint {
	return Endpoint{Route: route, Auth: auth, Handler: h}
}

// Subject is the subject a service serves a route on: the service, then
// the method and the path's segments as tokens, as nats micro's groups
// derive theirs ("POST /admin/projects/:projectId/invite" of membership is
// pinion.membership.POST.admin.projects.:projectId.invite). A dot within a
// segment, which NATS would read as a separator, becomes "_".
func Subject(service, route string) string { return pattern.Subject(service, route) }

// subjectOf is the subject e is served on by service.
func (e Endpoint) subjectOf(service string) string {
	if e.Auth.Mode() == Internal {
		return e.Route
	}
	return Subject(service, e.Route)
}

// endpointName is the micro endpoint name of a subject, which may hold
// only letters, digits, - and _.
func endpointName(subject string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '$':
			return '-'
		default:
			return '_'
		}
	}, subject)
}
