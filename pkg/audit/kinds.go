package audit

// Code systems of the AuditEvent codes, as IHE's Basic Audit Log Patterns
// (BALP) use them, and Pinion's own for what BALP does not name.
const (
	DICOM       = "http://dicom.nema.org/resources/ontology/DCM"
	EventType   = "http://terminology.hl7.org/CodeSystem/audit-event-type"
	Interaction = "http://hl7.org/fhir/restful-interaction"
	ObjectRole  = "http://terminology.hl7.org/CodeSystem/object-role"
	EntityType  = "http://terminology.hl7.org/CodeSystem/audit-entity-type"
	Pinion      = "https://pinion.health/fhir/CodeSystem/audit-event"
)

// Code is one coding.
type Code struct{ System, Code, Display string }

// The event types (AuditEvent.type).
var (
	// Authentication is BALP's "Basic Authentication" type: sign-in,
	// sign-out, tokens.
	Authentication = Code{DICOM, "110114", "User Authentication"}
	// SecurityAlert is DICOM's type for changes to who may do what.
	SecurityAlert = Code{DICOM, "110113", "Security Alert"}
	// REST is a RESTful interaction with the FHIR API (BALP's "Basic
	// Audit" and "Patient privacy" patterns).
	REST = Code{EventType, "rest", "Restful Operation"}
)

// Kind is one kind of event Pinion records: its type, its subtypes (a
// standard one where BALP or DICOM has it, and always Pinion's own, which
// names it exactly) and its action (C, R, U, D or E).
type Kind struct {
	Name     string // Pinion's code, the last subtype
	Type     Code
	Standard *Code // the standard subtype, when there is one
	Action   string
	Display  string
}

// Subtypes are the kind's subtype codings: the standard one first.
func (k Kind) Subtypes() []Code {
	own := Code{Pinion, k.Name, k.Display}
	if k.Standard == nil {
		return []Code{own}
	}
	return []Code{*k.Standard, own}
}

var (
	login          = &Code{DICOM, "110122", "Login"}
	logout         = &Code{DICOM, "110123", "Logout"}
	rolesChanged   = &Code{DICOM, "110136", "Security Roles Changed"}
	userAttributes = &Code{DICOM, "110137", "User Security Attributes Changed"}
)

// The kinds, one per line; docs/audit.md lists them with their codes.
var (
	// Authentication.
	SignIn         = Kind{"sign-in", Authentication, login, "E", "Sign-in"}
	SignOut        = Kind{"sign-out", Authentication, logout, "E", "Sign-out"}
	TokenIssued    = Kind{"token-issued", Authentication, nil, "E", "Token issued"}
	TokenRefreshed = Kind{"token-refreshed", Authentication, nil, "E", "Token refreshed"}
	TokenRefused   = Kind{"token-refused", Authentication, nil, "E", "Bearer token refused"}
	TokenRevoked   = Kind{"token-revoked", Authentication, nil, "E", "Token revoked"}
	ConsentGiven   = Kind{"consent-given", SecurityAlert, nil, "C", "Consent given to a client"}
	ConsentEnded   = Kind{"consent-withdrawn", SecurityAlert, nil, "D", "Consent withdrawn"}
	MFAEnrolled    = Kind{"mfa-enrolled", SecurityAlert, userAttributes, "U", "Second factor enrolled"}
	MFAReset       = Kind{"mfa-reset", SecurityAlert, userAttributes, "U", "Second factor reset"}
	PasswordSet    = Kind{"password-set", SecurityAlert, userAttributes, "U", "Password set"}
	SecretRotated  = Kind{"secret-rotated", SecurityAlert, userAttributes, "U", "Client secret rotated"}
	// Administration.
	ProjectCreated = Kind{"project-created", SecurityAlert, nil, "C", "Project created"}
	MemberInvited  = Kind{"member-invited", SecurityAlert, rolesChanged, "C", "Member invited"}
	MemberChanged  = Kind{"member-changed", SecurityAlert, rolesChanged, "U", "Membership changed"}
	MemberRemoved  = Kind{"member-removed", SecurityAlert, rolesChanged, "D", "Member removed"}
	ConfigChanged  = Kind{"security-config-changed", SecurityAlert, rolesChanged, "U", "Security setting changed"}
	// Access to a person's record.
	PatientRead   = Kind{"patient-read", REST, &Code{Interaction, "read", "read"}, "R", "Patient record read"}
	PatientSearch = Kind{"patient-search", REST, &Code{Interaction, "search-type", "search type"}, "E", "Patient records searched"}
	PatientExport = Kind{"patient-export", REST, &Code{Interaction, "search-system", "search system"}, "E", "Patient records exported"}
	// The trail itself.
	RetentionApplied = Kind{"retention", SecurityAlert, nil, "D", "Events past retention removed"}
)

// Kinds lists every kind, for the docs and the tests.
var Kinds = []Kind{SignIn, SignOut, TokenIssued, TokenRefreshed, TokenRefused, TokenRevoked, ConsentGiven, ConsentEnded,
	MFAEnrolled, MFAReset, PasswordSet, SecretRotated, ProjectCreated, MemberInvited, MemberChanged, MemberRemoved,
	ConfigChanged, PatientRead, PatientSearch, PatientExport, RetentionApplied}
