package audit

// The AuditEvent as the writer stores it, as Go types. Their fields are in
// the order of their JSON names at every level, and every value that can
// be empty is omitted when it is: encoding/json then writes exactly what
// it writes for the same resource as a map with its empty values dropped
// (fhir.DropEmpty), which is what the chain's digest covers and Verify
// recomputes (TestRenderedIsTheMap holds the two to it). A struct writes
// some five times faster than a map, and the writer writes every event.

type rendered struct {
	Action       string            `json:"action,omitempty"`
	Agent        []renderedAgent   `json:"agent,omitempty"`
	Entity       []renderedEntity  `json:"entity,omitempty"`
	Extension    []renderedChain   `json:"extension,omitempty"`
	ID           string            `json:"id,omitempty"`
	Meta         *renderedMeta     `json:"meta,omitempty"`
	Outcome      string            `json:"outcome,omitempty"`
	OutcomeDesc  string            `json:"outcomeDesc,omitempty"`
	Recorded     string            `json:"recorded,omitempty"`
	ResourceType string            `json:"resourceType"`
	Source       renderedSource    `json:"source"`
	Subtype      []*renderedCoding `json:"subtype,omitempty"`
	Type         *renderedCoding   `json:"type,omitempty"`
}

type renderedAgent struct {
	Name      string            `json:"name,omitempty"`
	Network   *renderedNetwork  `json:"network,omitempty"`
	Requestor bool              `json:"requestor"`
	Type      *renderedCodeable `json:"type,omitempty"`
	Who       *renderedRef      `json:"who,omitempty"`
}

type renderedNetwork struct {
	Address string `json:"address,omitempty"`
	Type    string `json:"type,omitempty"`
}

type renderedCodeable struct {
	Coding []*renderedCoding `json:"coding,omitempty"`
}

type renderedCoding struct {
	Code    string `json:"code,omitempty"`
	Display string `json:"display,omitempty"`
	System  string `json:"system,omitempty"`
}

type renderedRef struct {
	Reference string `json:"reference,omitempty"`
}

type renderedEntity struct {
	Description string          `json:"description,omitempty"`
	Query       string          `json:"query,omitempty"`
	Role        *renderedCoding `json:"role,omitempty"`
	Type        *renderedCoding `json:"type,omitempty"`
	What        *renderedRef    `json:"what,omitempty"`
}

type renderedSource struct {
	Observer renderedDisplay   `json:"observer"`
	Type     []*renderedCoding `json:"type"`
}

type renderedDisplay struct {
	Display string `json:"display"`
}

// renderedChain is the chain's extension (chain.go's ChainURL).
type renderedChain struct {
	Extension []renderedExt `json:"extension"`
	URL       string        `json:"url"`
}

type renderedExt struct {
	URL          string `json:"url"`
	ValueInteger int64  `json:"valueInteger,omitempty"`
	ValueString  string `json:"valueString,omitempty"`
}

type renderedMeta struct {
	LastUpdated string `json:"lastUpdated"`
	Project     string `json:"project,omitempty"`
	VersionID   string `json:"versionId"`
}
