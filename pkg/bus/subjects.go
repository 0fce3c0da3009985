package bus

// Service subjects. The gateway's route table maps each HTTP route to one
// of these; each service registers handlers for its own. Grep a subject to
// go from a route to its handler.
const (
	// identity
	SubjToken     = "pinion.identity.token"
	SubjMe        = "pinion.identity.me"
	SubjJWKS      = "pinion.identity.jwks"
	SubjDiscovery = "pinion.identity.discovery"
	SubjClientNew = "pinion.identity.client.create"
	SubjRotate    = "pinion.identity.client.rotate"
	SubjRotateOp  = "pinion.identity.client.rotate-op"
	SubjLogin     = "pinion.identity.login"
	SubjProfile   = "pinion.identity.profile"
	SubjSetPass   = "pinion.identity.setpassword"
	SubjResetPass = "pinion.identity.resetpassword"
	SubjLogout    = "pinion.identity.logout"
	SubjUserinfo  = "pinion.identity.userinfo"
	// SubjBasic checks HTTP Basic client credentials for the gateway (no
	// route of its own): a BasicAuth in, a BasicLogin out.
	SubjBasic = "pinion.identity.basic"
	// SubjWSBinding issues a WebSocket subscription's binding token.
	SubjWSBinding = "pinion.identity.ws-binding"
	// SubjRevoke and SubjIntrospect are RFC 7009 revocation and RFC 7662
	// introspection; SubjAuthRevoke is Medplum's POST /auth/revoke.
	SubjRevoke     = "pinion.identity.revoke"
	SubjIntrospect = "pinion.identity.introspect"
	SubjAuthRevoke = "pinion.identity.auth-revoke"
	// SubjConsents lists a person's consents to clients; SubjConsentDel
	// withdraws one.
	SubjConsents   = "pinion.identity.consents"
	SubjConsentDel = "pinion.identity.consent.delete"
	// The browser pages.
	SubjSetPassPage   = "pinion.identity.page.setpassword"
	SubjResetPassPage = "pinion.identity.page.resetpassword"
	SubjAuthorize     = "pinion.identity.page.authorize"

	// membership
	SubjProjectCreate = "pinion.membership.project.create"
	SubjProjectInit   = "pinion.membership.project.init"
	SubjInvite        = "pinion.membership.invite"
	SubjMemberGet     = "pinion.membership.member.get"
	SubjMemberUpdate  = "pinion.membership.member.update"
	SubjMemberPatch   = "pinion.membership.member.patch"
	SubjMemberDelete  = "pinion.membership.member.delete"
	SubjProjectGet    = "pinion.membership.project.get"
	SubjSecrets       = "pinion.membership.project.secrets"
	SubjSites         = "pinion.membership.project.sites"

	// fhir
	SubjMetadata = "pinion.fhir.metadata"
	SubjRead     = "pinion.fhir.read"
	SubjVRead    = "pinion.fhir.vread"
	SubjHistory  = "pinion.fhir.history"
	SubjSearch   = "pinion.fhir.search"
	SubjCreate   = "pinion.fhir.create"
	SubjUpdate   = "pinion.fhir.update"
	SubjPatch    = "pinion.fhir.patch"
	SubjDelete   = "pinion.fhir.delete"
	SubjValidate = "pinion.fhir.validate"
	SubjBatch    = "pinion.fhir.batch"
	// SubjJobStatus is a read of an AsyncJob (Medplum's job status URL),
	// through the same access check as any read.
	SubjJobStatus = "pinion.fhir.job.status"
	// Bulk Data export: the kick-off, and the status URL it answers with.
	SubjExport       = "pinion.fhir.export"
	SubjExportStatus = "pinion.fhir.export.status"
	SubjExportCancel = "pinion.fhir.export.cancel"

	// botexec
	SubjExecute   = "pinion.botexec.execute"
	SubjDeploy    = "pinion.botexec.deploy"
	SubjBotCreate = "pinion.botexec.bot.create"
	// SubjResend sends a resource again to its subscriptions ($resend).
	SubjResend = "pinion.botexec.resend"
)

// Resource change events are published on EventSubject(type, id) after a
// write; every repository instance listens to invalidate its read cache.
const EventPrefix = "pinion.events.resource."

// EventSubject is the subject of a change of one resource.
func EventSubject(resourceType, id string) string {
	return EventPrefix + resourceType + "." + id
}

// WSSubject carries the notifications of one WebSocket subscription, from
// botexec's matcher to the gateways whose sockets are bound to it. Like
// Medplum's, they are not kept: a socket not bound when a change happens
// does not see it.
func WSSubject(subscriptionID string) string { return "pinion.ws.subscription." + subscriptionID }

// SubjWSUnbound tells botexec that no socket of a gateway is bound to a
// WebSocket subscription any more (the body is its id): as in Medplum,
// such a subscription ends with its socket (a client that reconnects makes
// a new one).
const SubjWSUnbound = "pinion.botexec.ws-unbound"

// SubjSessionProject asks a session projector (pkg/projects) to bring the
// session entries one resource feeds in step with the store. Any service
// may ask: the request carries no caller, only what to read again.
const SubjSessionProject = "pinion.sessions.project"

// ClientChangedSubject carries the id of a client whose credentials changed:
// every identity instance forgets what it cached of that client. It is not
// a service request, so it lies outside the services' subjects.
const ClientChangedSubject = "pinion.clients.changed"

// BasicAuth is what the gateway read from `Authorization: Basic`, sent on
// SubjBasic; BasicLogin is the answer, the client's login, which the
// gateway then looks up as it does a token's.
type BasicAuth struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

type BasicLogin struct {
	LoginID string `json:"loginId"`
}
