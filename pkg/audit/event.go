package audit

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
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
// chain, which the writer adds: render's, as a map.
func (e *Event) Resource() map[string]any {
	b, _ := json.Marshal(e.render()) // plain structs of strings: cannot fail
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// render is the event as a FHIR AuditEvent (BALP's shape), without the
// chain. Its types (rendered.go) write the JSON encoding/json writes for
// the same resource as a map with its empty values dropped: the chain's
// digests, computed by the writer over this and checked by Verify over
// the map it reads back, agree.
func (e *Event) render() *rendered {
	k := kindByName(e.Kind)
	r := &rendered{
		ResourceType: "AuditEvent",
		Type:         coding(k.Type),
		Action:       cmp.Or(e.Action, k.Action),
		Recorded:     e.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
		Outcome:      e.Outcome,
		OutcomeDesc:  e.Detail,
		Agent:        e.agents(),
		Entity:       e.entities(),
		Source: renderedSource{Observer: renderedDisplay{Display: "Pinion"},
			Type: []*renderedCoding{{System: "http://terminology.hl7.org/CodeSystem/security-source-type", Code: "4", Display: "Application Server"}}},
	}
	for _, c := range k.Subtypes() {
		r.Subtype = append(r.Subtype, coding(c))
	}
	return r
}

// keys are the event's search keys in the trail (store.TrailBlock.Keys):
// each reference its AuditEvent's agent, entity and patient search
// parameters index, as repo's trail search asks for them.
func (e *Event) keys() []string {
	var out []string
	add := func(field, ref string) {
		switch {
		case ref == "":
		case strings.HasPrefix(ref, "Patient/"):
			// One key for a patient, whichever parameter names it: a
			// read names hundreds of patients a block, each a row.
			out = append(out, "s_patient|"+ref)
		default:
			out = append(out, field+"|"+ref)
		}
	}
	add("s_agent", e.Who)
	if e.Client != e.Who {
		add("s_agent", e.Client)
	}
	for _, en := range e.Entities {
		add("s_entity", en.What)
	}
	for _, p := range e.Patients {
		add("s_entity", p)
	}
	return out
}

// agents are who acted (requestor) and the client they acted through.
func (e *Event) agents() []renderedAgent {
	person := renderedAgent{Requestor: true, Name: e.Name, Who: ref(e.Who)}
	if e.Address != "" {
		person.Network = &renderedNetwork{Address: e.Address, Type: "2"}
	}
	agents := []renderedAgent{person}
	if e.Client != "" && e.Client != e.Who {
		agents = append(agents, renderedAgent{
			Type:      &renderedCodeable{Coding: []*renderedCoding{coding(Code{DICOM, "110150", "Application"})}},
			Who:       ref(e.Client),
			Requestor: false,
		})
	}
	return agents
}

// entities are the event's entities, then a Patient entity per patient
// touched (BALP's patient privacy pattern), each once.
func (e *Event) entities() []renderedEntity {
	var out []renderedEntity
	seen := map[string]bool{}
	for _, en := range e.Entities {
		m := renderedEntity{What: ref(en.What), Description: en.Detail}
		if en.What != "" && slices.Contains(e.Patients, en.What) { // a Patient read: the patient itself
			m.Type = coding(Code{EntityType, "1", "Person"})
			m.Role = coding(Code{ObjectRole, "1", "Patient"})
		}
		if en.Query != "" {
			// BALP's query entity: the search, base64 (R4's base64Binary).
			m.Type = coding(Code{EntityType, "2", "System Object"})
			m.Role = coding(Code{ObjectRole, "24", "Query"})
			m.Query = base64.StdEncoding.EncodeToString([]byte(en.Query))
		}
		if m != (renderedEntity{}) { // an empty entity is no entity
			out = append(out, m)
		}
		seen[en.What] = true
	}
	for _, p := range e.Patients {
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, renderedEntity{What: ref(p), Type: coding(Code{EntityType, "1", "Person"}), Role: coding(Code{ObjectRole, "1", "Patient"})})
	}
	return out
}

func coding(c Code) *renderedCoding {
	if c == (Code{}) {
		return nil
	}
	return &renderedCoding{System: c.System, Code: c.Code, Display: c.Display}
}

func ref(r string) *renderedRef {
	if r == "" {
		return nil
	}
	return &renderedRef{Reference: r}
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
