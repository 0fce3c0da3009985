package bus

// Services serve their HTTP routes on subjects derived from the route
// (Subject; the table is Routes). The subjects below are the ones that
// are no HTTP route.

// SubjBasic checks HTTP Basic client credentials for the gateway (no
// route of its own): a BasicAuth in, a BasicLogin out. Identity serves it.
const SubjBasic = "pinion.identity.basic"

// Resource change events are published on EventSubject(type, op) after a
// write; every repository instance listens to invalidate its read cache.
const EventPrefix = "pinion.events.resource."

// EventSubject is the subject of a change of a resource of resourceType:
// op is create, update or delete. The resource's id is in the event, not
// the subject: JetStream keeps an index entry in memory per subject a
// stream holds, and with one per resource that index grew with every
// resource written in the stream's seven days (half the objects of the
// server's live heap after 200,000 creates, all of them walked by each
// garbage collection). Filters of the form <type>.* and <type>.> still match.
func EventSubject(resourceType, op string) string {
	return EventPrefix + resourceType + "." + op
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

// SubjTokenRefused asks identity to record, in the audit trail, a bearer
// token the gateway refused (a RefusedToken in): the gateway writes
// nothing to JetStream itself. The gateway sends one per token a minute.
const SubjTokenRefused = "pinion.identity.token-refused"

// RefusedToken is a refused bearer token, as the gateway saw it. Login,
// User and TokenID are set only when its signature held (a revoked token,
// an ended login): then they are the server's own; Claimed is whatever an
// unverified token said it was, for the record only.
type RefusedToken struct {
	Reason  string `json:"reason"`
	Login   string `json:"login,omitempty"`
	User    string `json:"user,omitempty"`
	TokenID string `json:"jti,omitempty"`
	Claimed string `json:"claimed,omitempty"`
}
