package gateway

import "github.com/pinion-health/pinion/pkg/bus"

// route maps one HTTP route to the service subject that answers it.
type route struct {
	method  string
	path    string
	subject string
	auth    authMode
	// limited routes count against the per-IP sign-in rate limit.
	limited bool
}

// authMode says whether a route needs a bearer token.
type authMode int

const (
	token    authMode = iota // a valid access token, or 401
	public                   // no token looked at
	optional                 // a token is checked when one is sent (a browser sends none)
)

// routes is the whole HTTP surface. More specific paths come first: Fiber
// matches in registration order.
var routes = []route{
	{"GET", "/.well-known/jwks.json", bus.SubjJWKS, public, false},
	{"GET", "/.well-known/openid-configuration", bus.SubjDiscovery, public, false},
	{"GET", "/.well-known/oauth-authorization-server", bus.SubjDiscovery, public, false},
	{"GET", "/.well-known/smart-configuration", bus.SubjDiscovery, public, false},
	{"GET", "/fhir/R4/.well-known/smart-configuration", bus.SubjDiscovery, public, false},
	{"POST", "/oauth2/token", bus.SubjToken, public, true},
	{"GET", "/auth/me", bus.SubjMe, token, false},
	{"POST", "/auth/login", bus.SubjLogin, public, true},
	{"POST", "/auth/profile", bus.SubjProfile, public, true},
	{"POST", "/auth/setpassword", bus.SubjSetPass, public, true},
	{"POST", "/auth/resetpassword", bus.SubjResetPass, public, true},
	{"POST", "/oauth2/logout", bus.SubjLogout, token, true},
	{"GET", "/oauth2/logout", bus.SubjLogout, optional, true},
	{"GET", "/oauth2/userinfo", bus.SubjUserinfo, token, false},
	{"POST", "/oauth2/userinfo", bus.SubjUserinfo, token, false},

	// Pages for people in a browser.
	{"GET", "/setpassword/:id/:secret", bus.SubjSetPassPage, public, false},
	{"POST", "/setpassword/:id/:secret", bus.SubjSetPassPage, public, true},
	{"GET", "/resetpassword", bus.SubjResetPassPage, public, false},
	{"POST", "/resetpassword", bus.SubjResetPassPage, public, true},
	{"GET", "/oauth2/authorize", bus.SubjAuthorize, public, false},
	{"POST", "/oauth2/authorize", bus.SubjAuthorize, public, true},

	{"POST", "/admin/Project", bus.SubjProjectCreate, token, false},
	{"POST", "/admin/projects/:projectId/client", bus.SubjClientNew, token, false},
	{"POST", "/admin/projects/:projectId/client/:clientId/$rotate-secret", bus.SubjRotate, token, false},
	{"POST", "/admin/projects/:projectId/secrets", bus.SubjSecrets, token, false},
	{"POST", "/admin/projects/:projectId/sites", bus.SubjSites, token, false},
	{"POST", "/admin/projects/:projectId/invite", bus.SubjInvite, token, false},
	{"POST", "/admin/projects/:projectId/bot", bus.SubjBotCreate, token, false},
	{"GET", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberGet, token, false},
	{"POST", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberUpdate, token, false},
	{"PATCH", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberPatch, token, false},
	{"DELETE", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberDelete, token, false},
	{"GET", "/admin/projects/:projectId", bus.SubjProjectGet, token, false},

	{"GET", "/fhir/R4/metadata", bus.SubjMetadata, public, false},
	{"POST", "/fhir/R4/Project/$init", bus.SubjProjectInit, token, false},
	{"POST", "/fhir/R4/Bot/$execute", bus.SubjExecute, token, false},
	{"GET", "/fhir/R4/Bot/$execute", bus.SubjExecute, token, false},
	{"POST", "/fhir/R4/Bot/:id/$execute", bus.SubjExecute, token, false},
	{"GET", "/fhir/R4/Bot/:id/$execute", bus.SubjExecute, token, false},
	{"POST", "/fhir/R4/Bot/:id/$deploy", bus.SubjDeploy, token, false},
	{"POST", "/fhir/R4/ClientApplication/:id/$rotate-secret", bus.SubjRotateOp, token, false},
	{"GET", "/fhir/R4/job/:id/status", bus.SubjJobStatus, token, false},
	{"POST", "/fhir/R4/$export", bus.SubjExport, token, false},
	{"GET", "/fhir/R4/$export", bus.SubjExport, token, false},
	{"POST", "/fhir/R4/Patient/$export", bus.SubjExport, token, false},
	{"GET", "/fhir/R4/Patient/$export", bus.SubjExport, token, false},
	{"POST", "/fhir/R4/Group/:id/$export", bus.SubjExport, token, false},
	{"GET", "/fhir/R4/Group/:id/$export", bus.SubjExport, token, false},
	{"GET", "/fhir/R4/bulkdata/export/:id", bus.SubjExportStatus, token, false},
	{"DELETE", "/fhir/R4/bulkdata/export/:id", bus.SubjExportCancel, token, false},
	{"POST", "/fhir/R4", bus.SubjBatch, token, false},
	{"POST", "/fhir/R4/:type/$validate", bus.SubjValidate, token, false},
	{"PUT", "/fhir/R4/:type", bus.SubjUpdate, token, false},
	{"GET", "/fhir/R4/:type", bus.SubjSearch, token, false},
	{"POST", "/fhir/R4/:type/_search", bus.SubjSearch, token, false},
	{"POST", "/fhir/R4/:type", bus.SubjCreate, token, false},
	{"GET", "/fhir/R4/:type/:id/_history/:vid", bus.SubjVRead, token, false},
	{"GET", "/fhir/R4/:type/:id/_history", bus.SubjHistory, token, false},
	{"GET", "/fhir/R4/:type/:id", bus.SubjRead, token, false},
	{"PUT", "/fhir/R4/:type/:id", bus.SubjUpdate, token, false},
	{"PATCH", "/fhir/R4/:type/:id", bus.SubjPatch, token, false},
	{"DELETE", "/fhir/R4/:type/:id", bus.SubjDelete, token, false},
}
