package bus

import (
	"net/url"
	"strings"
)

// AuthMode says what a route needs of its caller and, with the traits
// added to it, what else is done for the route.
type AuthMode int

const (
	Token    AuthMode = iota // a valid access token (or client credentials by HTTP Basic), or 401
	Public                   // no credentials looked at
	Optional                 // credentials are checked when sent (a browser sends none)
	// Internal marks an endpoint that is no HTTP route: a request only
	// Pinion's own processes send, on the subject its Route names.
	Internal
)

// Traits, added to a route's mode (bus.Public | bus.SignInLimit), say
// what is done for the route besides answering it, on the line that
// declares it, so that no one keeps a list of paths beside the routes:
// routegen carries them into Routes, where the gateway reads them, and a
// service reads them from its own endpoints.
const (
	// SignInLimit counts the route against the per-IP sign-in rate limit
	// (the gateway).
	SignInLimit AuthMode = 1 << (4 + iota)
	// NamesApplied: the gateway names, in session.AppliedHeader, the
	// memberships revision its session view has applied, so the service
	// refuses what this gateway already saw removed (identity's token
	// endpoint) or runs a bot with the rights this gateway last saw
	// (botexec's $execute).
	NamesApplied
	// SignsURLs: the attachment URLs of the route's FHIR JSON answers are
	// signed storage URLs the caller's browser can load (the fhir service's
	// signing; a batch's entries are answered by the same handlers).
	SignsURLs
	// WritesResource: the route's body is a resource or a patch to store,
	// whose signed storage URLs are stored as the Binary references they
	// stand for (the fhir service's signing), as a client sends back what
	// it read.
	WritesResource
)

// modeBits are the bits of an AuthMode below its traits.
const modeBits AuthMode = 1<<4 - 1

// Mode is m without its traits: Token, Public, Optional or Internal.
func (m AuthMode) Mode() AuthMode { return m & modeBits }

// Has reports whether m carries every trait of t.
func (m AuthMode) Has(t AuthMode) bool { return m&t == t }

// Limited reports whether m counts against the sign-in rate limit.
func (m AuthMode) Limited() bool { return m.Has(SignInLimit) }

// Route maps one HTTP route to the service subject that answers it.
type Route struct {
	Method, Path, Subject string
	// Mode is the route's mode as its bus.Handle call writes it: who may
	// call it (Auth) with its traits (Has).
	Mode AuthMode
	// Service and Handler name who answers: services/<Service>, the
	// handler named beside the route in its bus.Handle call.
	Service, Handler string
}

// Auth is what the route needs of its caller: Token, Public or Optional.
func (r Route) Auth() AuthMode { return r.Mode.Mode() }

// Has reports whether the route carries every trait of t.
func (r Route) Has(t AuthMode) bool { return r.Mode.Has(t) }

// Pattern is the route as services declare it: "METHOD /path".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// Routes (routes_gen.go) is the whole HTTP surface, the one table of it,
// collected by `go generate` from the services' bus.Handle calls: the
// gateway registers it, and a bot's calls and a batch's entries resolve
// through it (FHIRRoute). More specific paths come first (at the first
// segment where two patterns differ, a literal before a :name), and the
// first match wins, as in the gateway's router.
//
// From a path to its handler: grep the path under services/; the line
// that declares it names its handler.
//
//go:generate go run ./internal/routegen -root ../.. -out routes_gen.go

// Match finds the first route of method whose path pattern matches path
// (segments equal, or a :name segment taking any one non-empty segment),
// with the values of its :name segments.
//
// Match is the second of two matchers over Routes, on purpose. The gateway
// matches HTTP requests with Fiber's router, where it registers Routes in
// this order (the first match wins there too); Match resolves the requests
// that come with no HTTP request: a bot's calls and a batch's entries
// (FHIRRoute), the console's and Pinion's own calls of a route (SubjectOf).
// The gateway does not dispatch through Match, nor through a faster
// matcher Match could become, because:
//   - it needs Fiber's router anyway, for its own routes (health checks,
//     the WebSocket, the console's pages, the final 404) and for each
//     route's chain of handlers (the sign-in rate limiter is Fiber
//     middleware, which goes on with c.Next()): a matcher of ours would be
//     a second lookup for every request, not one instead of Fiber's;
//   - Fiber's lookup allocates nothing, its routes bucketed by prefix: a
//     request reaches its handler in 0.1 to 0.2 µs, where Match, which
//     scans the table and splits strings, takes some 5 µs and 30 to 50
//     allocations (go test -bench, 2 cores). That is nothing beside the
//     bus round trip and the store work of a bot's call or a batch entry,
//     and it keeps Match short enough to read at a glance;
//   - HTTP paths keep Fiber's rules, which clients may rely on: a literal
//     segment matches in any case (/FHIR/R4/Patient/1), and parameters
//     come still percent-encoded (the gateway decodes them). Match takes
//     the paths Pinion writes itself, exactly.
//
// Both read the one table in its one order, and TestGatewayRoutesAsMatch
// (in gateway) holds them together: for sample paths of every route
// (plain values, and each literal some route has at a :name's segment),
// the gateway forwards to the route Match finds, with its parameters.
func Match(method, path string) (Route, map[string]string, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, r := range Routes {
		if r.Method != method {
			continue
		}
		pat := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(pat) != len(segs) {
			continue
		}
		var params map[string]string
		ok := true
		for i, p := range pat {
			switch {
			case strings.HasPrefix(p, ":") && segs[i] != "":
				if params == nil {
					params = map[string]string{}
				}
				params[p[1:]] = segs[i]
			case p != segs[i]:
				ok = false
			}
			if !ok {
				break
			}
		}
		if ok {
			if params == nil {
				params = map[string]string{}
			}
			return r, params, true
		}
	}
	return Route{}, nil, false
}

// FHIRRoute resolves a request relative to the FHIR base ("Patient/123",
// "/Patient?name=x", "Bot/<id>/$execute") through Routes, for calls that
// do not come over HTTP (a bot's medplum client, a batch's entries): its
// route, its parameters and the query. ok is false for a path that is not
// a FHIR route.
func FHIRRoute(method, rel string) (route Route, params map[string]string, q url.Values, rawQuery string, ok bool) {
	path, rawQuery, _ := strings.Cut(strings.TrimPrefix(rel, "/"), "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Route{}, nil, nil, "", false
	}
	full := "/fhir/R4"
	if path = strings.TrimSuffix(path, "/"); path != "" {
		full += "/" + path
	}
	r, params, ok := Match(strings.ToUpper(method), full)
	if !ok || !strings.HasPrefix(r.Path, "/fhir/R4") {
		return Route{}, nil, nil, "", false
	}
	return r, params, q, rawQuery, true
}

// SubjectOf is the subject of the route that answers method and path (a
// concrete path, or a route's own pattern), or "" when none does: for
// Pinion's own calls of a route, which name it by its path.
func SubjectOf(method, path string) string {
	r, _, ok := Match(method, path)
	if !ok {
		return ""
	}
	return r.Subject
}
