package audit

import (
	"cmp"
	"encoding/base64"
	"slices"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
)

// Outcomes (AuditEvent.outcome).
const (
	Success        = "0"
	MinorFailure   = "4" // refused: a wrong password, an unknown client
	SeriousFailure = "8" // failed: the server could not do it
)

// Event is one thing that happened, as a service records it.
type Event struct {
	// ID names the event wherever it goes (the stream's message id, the
	// chain's record of it): made by Record when empty.
	ID      string    `json:"id"`
	Kind    string    `json:"kind"` // a Kind's Name
	Project string    `json:"project,omitempty"`
	Time    time.Time `json:"time"`
	Outcome string    `json:"outcome"`
	// Action overrides the kind's (C, R, U, D or E): a kind that covers
	// creating, changing and deleting one sort of thing.
	Action string `json:"action,omitempty"`
	Detail string `json:"detail,omitempty"` // outcomeDesc: why it failed
	// Who did it: a reference (User/…, ClientApplication/…, Bot/…), and
	// the name they gave when nobody is known (the address typed at a
	// failed sign-in).
	Who  string `json:"who,omitempty"`
	Name string `json:"name,omitempty"`
	// Client is the client application the person acted through.
	Client string `json:"client,omitempty"`
	// Address is the network address the request came from.
	Address string `json:"address,omitempty"`
	// Entities are what the event was about; Patients, the patients whose
	// records it touched.
	Entities []Entity `json:"entities,omitempty"`
	Patients []string `json:"patients,omitempty"`
}

// Entity is one thing an event was about.
type Entity struct {
	What   string `json:"what,omitempty"`   // a reference
	Detail string `json:"detail,omitempty"` // e.g. the scopes of a token
	// Query is a search as asked ("Observation?code=…"), for BALP's
	// query entity.
	Query string `json:"query,omitempty"`
}

// kindByName finds a kind; an unknown name is recorded under its own name,
// as Pinion's code, so that an event of a newer build is never lost.
func kindByName(name string) Kind {
	for _, k := range Kinds {
		if k.Name == name {
			return k
		}
	}
	return Kind{Name: name, Type: SecurityAlert, Action: "E", Display: name}
}

// Resource is the event as a FHIR AuditEvent (BALP's shape), without the
// chain, which the writer adds.
func (e *Event) Resource() map[string]any {
	k := kindByName(e.Kind)
	subtypes := make([]any, 0, 2)
	for _, c := range k.Subtypes() {
		subtypes = append(subtypes, coding(c))
	}
	res := map[string]any{
		"resourceType": "AuditEvent",
		"type":         coding(k.Type),
		"subtype":      subtypes,
		"action":       cmp.Or(e.Action, k.Action),
		"recorded":     e.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
		"outcome":      e.Outcome,
		"agent":        e.agents(),
		"source": map[string]any{
			"observer": map[string]any{"display": "Pinion"},
			"type": []any{map[string]any{"system": "http://terminology.hl7.org/CodeSystem/security-source-type",
				"code": "4", "display": "Application Server"}},
		},
	}
	if e.Detail != "" {
		res["outcomeDesc"] = e.Detail
	}
	if ents := e.entities(); len(ents) > 0 {
		res["entity"] = ents
	}
	return res
}

// agents are who acted (requestor) and the client they acted through.
func (e *Event) agents() []any {
	person := map[string]any{"requestor": true}
	if e.Who != "" {
		person["who"] = map[string]any{"reference": e.Who}
	}
	if e.Name != "" {
		person["name"] = e.Name
	}
	if e.Address != "" {
		person["network"] = map[string]any{"address": e.Address, "type": "2"}
	}
	agents := []any{person}
	if e.Client != "" && e.Client != e.Who {
		agents = append(agents, map[string]any{
			"type":      map[string]any{"coding": []any{coding(Code{DICOM, "110150", "Application"})}},
			"who":       map[string]any{"reference": e.Client},
			"requestor": false,
		})
	}
	return agents
}

// entities are the event's entities, then a Patient entity per patient
// touched (BALP's patient privacy pattern), each once.
func (e *Event) entities() []any {
	var out []any
	seen := map[string]bool{}
	for _, en := range e.Entities {
		m := map[string]any{}
		if en.What != "" {
			m["what"] = map[string]any{"reference": en.What}
			if slices.Contains(e.Patients, en.What) { // a Patient read: the patient itself
				m["type"] = coding(Code{EntityType, "1", "Person"})
				m["role"] = coding(Code{ObjectRole, "1", "Patient"})
			}
		}
		if en.Detail != "" {
			m["description"] = en.Detail
		}
		if en.Query != "" {
			// BALP's query entity: the search, base64 (R4's base64Binary).
			m["type"] = coding(Code{EntityType, "2", "System Object"})
			m["role"] = coding(Code{ObjectRole, "24", "Query"})
			m["query"] = base64.StdEncoding.EncodeToString([]byte(en.Query))
		}
		out = append(out, m)
		seen[en.What] = true
	}
	for _, p := range e.Patients {
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, map[string]any{
			"what": map[string]any{"reference": p},
			"type": coding(Code{EntityType, "1", "Person"}),
			"role": coding(Code{ObjectRole, "1", "Patient"}),
		})
	}
	return out
}

func coding(c Code) map[string]any {
	m := map[string]any{"system": c.System, "code": c.Code}
	if c.Display != "" {
		m["display"] = c.Display
	}
	return m
}

// ClientRef is the client application a request came through, as an event
// names it: "" for none, and for a built-in client (the console, Medplum's
// CLI), which is no ClientApplication to refer to.
func ClientRef(id string) string {
	if id == "" || len(id) > 128 || auth.BuiltinClient(id) {
		return ""
	}
	return "ClientApplication/" + id
}
