package bus

import (
	"net/url"
	"strings"
)

// AuthMode says what a route needs of its caller.
type AuthMode int

const (
	Token    AuthMode = iota // a valid access token (or client credentials by HTTP Basic), or 401
	Public                   // no credentials looked at
	Optional                 // credentials are checked when sent (a browser sends none)
)

// Route maps one HTTP route to the service subject that answers it.
type Route struct {
	Method, Path, Subject string
	Auth                  AuthMode
	// Limited routes count against the per-IP sign-in rate limit.
	Limited bool
}

// Routes is the whole HTTP surface, the one table of it: the gateway
// registers it, and a bot's calls and a batch's entries resolve through it
// (FHIRRoute). More specific paths come first: the first match wins, as in
// the gateway's router.
//
// From a route to its handler: the subject's prefix names the service
// (pinion.fhir.* is services/fhir), and the subject constant appears once
// in that service's map of subjects to handlers, the one it gives
// bus.Serve in services/<name>/<name>.go; TestEverySubjectServedOnce
// checks that each subject here is served by exactly one service.
var Routes = []Route{
	{"GET", "/.well-known/jwks.json", SubjJWKS, Public, false},
	{"GET", "/.well-known/openid-configuration", SubjDiscovery, Public, false},
	{"GET", "/.well-known/oauth-authorization-server", SubjDiscovery, Public, false},
	{"GET", "/.well-known/smart-configuration", SubjDiscovery, Public, false},
	{"GET", "/fhir/R4/.well-known/smart-configuration", SubjDiscovery, Public, false},
	{"POST", "/oauth2/token", SubjToken, Public, true},
	{"POST", "/oauth2/revoke", SubjRevoke, Public, true},
	{"POST", "/oauth2/introspect", SubjIntrospect, Public, true},
	{"GET", "/auth/me", SubjMe, Token, false},
	{"POST", "/auth/login", SubjLogin, Public, true},
	{"POST", "/auth/profile", SubjProfile, Public, true},
	{"POST", "/auth/setpassword", SubjSetPass, Public, true},
	{"POST", "/auth/resetpassword", SubjResetPass, Public, true},
	{"POST", "/auth/revoke", SubjAuthRevoke, Token, false},
	// Optional: a browser posts RP-initiated logout, or its confirmation, with no token.
	{"POST", "/oauth2/logout", SubjLogout, Optional, true},
	{"GET", "/oauth2/logout", SubjLogout, Optional, true},
	{"GET", "/oauth2/userinfo", SubjUserinfo, Token, false},
	{"POST", "/oauth2/userinfo", SubjUserinfo, Token, false},
	{"GET", "/auth/consents", SubjConsents, Token, false},
	{"DELETE", "/auth/consents/:clientId", SubjConsentDel, Token, false},

	// Pages for people in a browser.
	{"GET", "/setpassword/:id/:secret", SubjSetPassPage, Public, false},
	{"POST", "/setpassword/:id/:secret", SubjSetPassPage, Public, true},
	{"GET", "/resetpassword", SubjResetPassPage, Public, false},
	{"POST", "/resetpassword", SubjResetPassPage, Public, true},
	{"GET", "/oauth2/authorize", SubjAuthorize, Public, false},
	{"POST", "/oauth2/authorize", SubjAuthorize, Public, true},

	{"POST", "/admin/Project", SubjProjectCreate, Token, false},
	{"POST", "/admin/projects/:projectId/client", SubjClientNew, Token, false},
	{"POST", "/admin/projects/:projectId/client/:clientId/$rotate-secret", SubjRotate, Token, false},
	{"POST", "/admin/projects/:projectId/secrets", SubjSecrets, Token, false},
	{"POST", "/admin/projects/:projectId/sites", SubjSites, Token, false},
	{"POST", "/admin/projects/:projectId/invite", SubjInvite, Token, false},
	{"POST", "/admin/projects/:projectId/bot", SubjBotCreate, Token, false},
	{"GET", "/admin/projects/:projectId/members/:membershipId", SubjMemberGet, Token, false},
	{"POST", "/admin/projects/:projectId/members/:membershipId", SubjMemberUpdate, Token, false},
	{"PATCH", "/admin/projects/:projectId/members/:membershipId", SubjMemberPatch, Token, false},
	{"DELETE", "/admin/projects/:projectId/members/:membershipId", SubjMemberDelete, Token, false},
	{"GET", "/admin/projects/:projectId", SubjProjectGet, Token, false},

	{"GET", "/fhir/R4/metadata", SubjMetadata, Public, false},
	{"POST", "/fhir/R4/Project/$init", SubjProjectInit, Token, false},
	{"POST", "/fhir/R4/Bot/$execute", SubjExecute, Token, false},
	{"GET", "/fhir/R4/Bot/$execute", SubjExecute, Token, false},
	{"POST", "/fhir/R4/Bot/:id/$execute", SubjExecute, Token, false},
	{"GET", "/fhir/R4/Bot/:id/$execute", SubjExecute, Token, false},
	{"POST", "/fhir/R4/Bot/:id/$deploy", SubjDeploy, Token, false},
	{"POST", "/fhir/R4/ClientApplication/:id/$rotate-secret", SubjRotateOp, Token, false},
	{"GET", "/fhir/R4/Subscription/:id/$get-ws-binding-token", SubjWSBinding, Token, false},
	{"GET", "/fhir/R4/job/:id/status", SubjJobStatus, Token, false},
	{"POST", "/fhir/R4/$export", SubjExport, Token, false},
	{"GET", "/fhir/R4/$export", SubjExport, Token, false},
	{"POST", "/fhir/R4/Patient/$export", SubjExport, Token, false},
	{"GET", "/fhir/R4/Patient/$export", SubjExport, Token, false},
	{"POST", "/fhir/R4/Group/:id/$export", SubjExport, Token, false},
	{"GET", "/fhir/R4/Group/:id/$export", SubjExport, Token, false},
	{"GET", "/fhir/R4/bulkdata/export/:id", SubjExportStatus, Token, false},
	{"DELETE", "/fhir/R4/bulkdata/export/:id", SubjExportCancel, Token, false},
	{"POST", "/fhir/R4", SubjBatch, Token, false},
	{"POST", "/fhir/R4/:type/$validate", SubjValidate, Token, false},
	{"POST", "/fhir/R4/:type/:id/$resend", SubjResend, Token, false},
	{"PUT", "/fhir/R4/:type", SubjUpdate, Token, false},
	{"GET", "/fhir/R4/:type", SubjSearch, Token, false},
	{"POST", "/fhir/R4/:type/_search", SubjSearch, Token, false},
	{"POST", "/fhir/R4/:type", SubjCreate, Token, false},
	{"GET", "/fhir/R4/:type/:id/_history/:vid", SubjVRead, Token, false},
	{"GET", "/fhir/R4/:type/:id/_history", SubjHistory, Token, false},
	{"GET", "/fhir/R4/:type/:id", SubjRead, Token, false},
	{"PUT", "/fhir/R4/:type/:id", SubjUpdate, Token, false},
	{"PATCH", "/fhir/R4/:type/:id", SubjPatch, Token, false},
	{"DELETE", "/fhir/R4/:type/:id", SubjDelete, Token, false},
}

// Match finds the first route of method whose path pattern matches path
// (segments equal, or a :name segment taking any one non-empty segment),
// with the values of its :name segments.
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
// subject, route parameters and query. ok is false for a path that is not
// a FHIR route.
func FHIRRoute(method, rel string) (subject string, params map[string]string, q url.Values, rawQuery string, ok bool) {
	path, rawQuery, _ := strings.Cut(strings.TrimPrefix(rel, "/"), "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, nil, "", false
	}
	full := "/fhir/R4"
	if path = strings.TrimSuffix(path, "/"); path != "" {
		full += "/" + path
	}
	r, params, ok := Match(strings.ToUpper(method), full)
	if !ok || !strings.HasPrefix(r.Path, "/fhir/R4") {
		return "", nil, nil, "", false
	}
	return r.Subject, params, q, rawQuery, true
}
