package console

// pkg/audit's vocabulary, as the audit pages need it. The gateway links no
// store (cmd/gateway's TestLinksNoStore) and pkg/audit's writer does, so
// the console cannot import it: the kinds and codes are kept here, and
// TestAuditVocabularyInStep holds them equal to pkg/audit's, so that a
// kind added there fails the build's tests until it is offered here.

// auditKind is one kind of event: Pinion's code and its display.
type auditKind struct{ Name, Display string }

// auditKinds are audit.Kinds, in their order.
var auditKinds = []auditKind{
	{"sign-in", "Sign-in"},
	{"sign-out", "Sign-out"},
	{"token-issued", "Token issued"},
	{"token-refreshed", "Token refreshed"},
	{"token-refused", "Bearer token refused"},
	{"token-revoked", "Token revoked"},
	{"consent-given", "Consent given to a client"},
	{"consent-withdrawn", "Consent withdrawn"},
	{"mfa-enrolled", "Second factor enrolled"},
	{"mfa-reset", "Second factor reset"},
	{"password-set", "Password set"},
	{"secret-rotated", "Client secret rotated"},
	{"project-created", "Project created"},
	{"member-invited", "Member invited"},
	{"member-changed", "Membership changed"},
	{"member-removed", "Member removed"},
	{"security-config-changed", "Security setting changed"},
	{"patient-read", "Patient record read"},
	{"patient-search", "Patient records searched"},
	{"patient-export", "Patient records exported"},
	{"retention", "Events past retention removed"},
}

const (
	// auditSystem is audit.Pinion: the system of Pinion's own subtype.
	auditSystem = "https://pinion.health/fhir/CodeSystem/audit-event"
	// outcomeSuccess and outcomeRefused are audit.Success and
	// audit.MinorFailure (AuditEvent.outcome).
	outcomeSuccess = "0"
	outcomeRefused = "4"
)
