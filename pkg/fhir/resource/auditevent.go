package resource

import (
	"encoding/json"
	"strconv"
)

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

// Map is the AuditEvent as the repository takes it, the same map
// resource.Map gives (TestAuditEventMap holds them equal), built directly:
// bots write one per run, and reading back its JSON was most of what
// recording a run cost before the store.
func (e *AuditEvent) Map() map[string]any {
	m := map[string]any{
		"resourceType": e.ResourceType,
		"type":         e.Type.m(),
		"recorded":     e.Recorded,
		"outcome":      e.Outcome,
		"agent":        list(e.Agent, AuditAgent.m),
		"entity":       list(e.Entity, AuditEntity.m),
	}
	if len(e.Subtype) > 0 {
		m["subtype"] = list(e.Subtype, Coding.m)
	}
	if e.Period != nil {
		m["period"] = map[string]any{"start": e.Period.Start, "end": e.Period.End}
	}
	if e.OutcomeDesc != "" {
		m["outcomeDesc"] = e.OutcomeDesc
	}
	if e.Source != nil {
		m["source"] = map[string]any{"observer": e.Source.Observer.m()}
	}
	if len(e.Extension) > 0 {
		m["extension"] = list(e.Extension, Extension.m)
	}
	return m
}

// list is a slice as its JSON reads back: nil is null (an untyped nil),
// as encoding/json writes it.
func list[T any](in []T, f func(T) map[string]any) any {
	if in == nil {
		return nil
	}
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func (a AuditAgent) m() map[string]any {
	m := map[string]any{"requestor": a.Requestor}
	if a.Type != nil {
		m["type"] = map[string]any{"text": a.Type.Text}
	}
	if a.Who != nil {
		m["who"] = a.Who.m()
	}
	return m
}

func (e AuditEntity) m() map[string]any {
	return map[string]any{"what": e.What.m(), "role": e.Role.m()}
}

func (x Extension) m() map[string]any {
	return map[string]any{"url": x.URL, "valueInteger": json.Number(strconv.FormatInt(x.ValueInteger, 10))}
}

func (c Coding) m() map[string]any {
	m := map[string]any{"code": c.Code}
	if c.System != "" {
		m["system"] = c.System
	}
	if c.Display != "" {
		m["display"] = c.Display
	}
	return m
}

func (r Reference) m() map[string]any {
	m := map[string]any{"reference": r.Reference}
	if r.Display != "" {
		m["display"] = r.Display
	}
	return m
}
