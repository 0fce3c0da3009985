package gateway

import "github.com/pinion-health/pinion/pkg/bus"

// route maps one HTTP route to the service subject that answers it.
type route struct {
	method  string
	path    string
	subject string
	// public routes need no token.
	public bool
	// limited routes count against the per-IP sign-in rate limit.
	limited bool
}

// routes is the whole HTTP surface. More specific paths come first: Fiber
// matches in registration order.
var routes = []route{
	{"GET", "/.well-known/jwks.json", bus.SubjJWKS, true, false},
	{"GET", "/.well-known/openid-configuration", bus.SubjDiscovery, true, false},
	{"GET", "/.well-known/oauth-authorization-server", bus.SubjDiscovery, true, false},
	{"GET", "/.well-known/smart-configuration", bus.SubjDiscovery, true, false},
	{"GET", "/fhir/R4/.well-known/smart-configuration", bus.SubjDiscovery, true, false},
	{"POST", "/oauth2/token", bus.SubjToken, true, true},
	{"GET", "/auth/me", bus.SubjMe, false, false},
	{"POST", "/auth/login", bus.SubjLogin, true, true},
	{"POST", "/auth/profile", bus.SubjProfile, true, true},
	{"POST", "/auth/setpassword", bus.SubjSetPass, true, true},
	{"POST", "/auth/resetpassword", bus.SubjResetPass, true, true},
	{"POST", "/oauth2/logout", bus.SubjLogout, false, true},
	{"GET", "/oauth2/logout", bus.SubjLogout, false, true},

	// Pages for people in a browser.
	{"GET", "/setpassword/:id/:secret", bus.SubjSetPassPage, true, false},
	{"POST", "/setpassword/:id/:secret", bus.SubjSetPassPage, true, true},
	{"GET", "/resetpassword", bus.SubjResetPassPage, true, false},
	{"POST", "/resetpassword", bus.SubjResetPassPage, true, true},
	{"GET", "/oauth2/authorize", bus.SubjAuthorize, true, false},
	{"POST", "/oauth2/authorize", bus.SubjAuthorize, true, true},

	{"POST", "/admin/Project", bus.SubjProjectCreate, false, false},
	{"POST", "/admin/projects/:projectId/client", bus.SubjClientNew, false, false},
	{"POST", "/admin/projects/:projectId/client/:clientId/$rotate-secret", bus.SubjRotate, false, false},
	{"POST", "/admin/projects/:projectId/secrets", bus.SubjSecrets, false, false},
	{"POST", "/admin/projects/:projectId/sites", bus.SubjSites, false, false},
	{"POST", "/admin/projects/:projectId/invite", bus.SubjInvite, false, false},
	{"POST", "/admin/projects/:projectId/bot", bus.SubjBotCreate, false, false},
	{"GET", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberGet, false, false},
	{"POST", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberUpdate, false, false},
	{"PATCH", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberPatch, false, false},
	{"DELETE", "/admin/projects/:projectId/members/:membershipId", bus.SubjMemberDelete, false, false},
	{"GET", "/admin/projects/:projectId", bus.SubjProjectGet, false, false},

	{"GET", "/fhir/R4/metadata", bus.SubjMetadata, true, false},
	{"POST", "/fhir/R4/Project/$init", bus.SubjProjectInit, false, false},
	{"POST", "/fhir/R4/Bot/$execute", bus.SubjExecute, false, false},
	{"GET", "/fhir/R4/Bot/$execute", bus.SubjExecute, false, false},
	{"POST", "/fhir/R4/Bot/:id/$execute", bus.SubjExecute, false, false},
	{"GET", "/fhir/R4/Bot/:id/$execute", bus.SubjExecute, false, false},
	{"POST", "/fhir/R4/Bot/:id/$deploy", bus.SubjDeploy, false, false},
	{"POST", "/fhir/R4/ClientApplication/:id/$rotate-secret", bus.SubjRotateOp, false, false},
	{"GET", "/fhir/R4/job/:id/status", bus.SubjJobStatus, false, false},
	{"POST", "/fhir/R4", bus.SubjBatch, false, false},
	{"POST", "/fhir/R4/:type/$validate", bus.SubjValidate, false, false},
	{"PUT", "/fhir/R4/:type", bus.SubjUpdate, false, false},
	{"GET", "/fhir/R4/:type", bus.SubjSearch, false, false},
	{"POST", "/fhir/R4/:type/_search", bus.SubjSearch, false, false},
	{"POST", "/fhir/R4/:type", bus.SubjCreate, false, false},
	{"GET", "/fhir/R4/:type/:id/_history/:vid", bus.SubjVRead, false, false},
	{"GET", "/fhir/R4/:type/:id/_history", bus.SubjHistory, false, false},
	{"GET", "/fhir/R4/:type/:id", bus.SubjRead, false, false},
	{"PUT", "/fhir/R4/:type/:id", bus.SubjUpdate, false, false},
	{"PATCH", "/fhir/R4/:type/:id", bus.SubjPatch, false, false},
	{"DELETE", "/fhir/R4/:type/:id", bus.SubjDelete, false, false},
}
