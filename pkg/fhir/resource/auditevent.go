package resource

// AuditEvent is the AuditEvent Pinion records of a bot run or a
// subscription delivery, with the elements Medplum's own carry.
type AuditEvent struct {
	ResourceType string   `json:"resourceType"`
	Type         Coding   `json:"type"`
	Subtype      []Coding `json:"subtype,omitempty"`
	Recorded     string   `json:"recorded"`
	Period       *Period  `json:"period,omitempty"`
	Outcome      string   `json:"outcome"`
	// OutcomeDesc is omitted when empty: the repository drops an empty
	// string anyway.
	OutcomeDesc string        `json:"outcomeDesc,omitempty"`
	Agent       []AuditAgent  `json:"agent"`
	Source      *AuditSource  `json:"source,omitempty"`
	Entity      []AuditEntity `json:"entity"`
	Extension   []Extension   `json:"extension,omitempty"`
}

// AuditAgent is one AuditEvent.agent: who (a user or bot), or a type
// (a subscription).
type AuditAgent struct {
	Type      *CodeableConcept `json:"type,omitempty"`
	Who       *Reference       `json:"who,omitempty"`
	Requestor bool             `json:"requestor"`
}

// AuditSource is AuditEvent.source: what observed the event.
type AuditSource struct {
	Observer Reference `json:"observer"`
}

// AuditEntity is one AuditEvent.entity: a resource involved, and its role.
type AuditEntity struct {
	What Reference `json:"what"`
	Role Coding    `json:"role"`
}

// Extension is a FHIR extension with an integer value, the one kind
// Pinion writes (a delivery's durationMs).
type Extension struct {
	URL          string `json:"url"`
	ValueInteger int64  `json:"valueInteger"`
}
