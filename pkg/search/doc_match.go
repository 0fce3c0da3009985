package search

import (
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// Doc is one resource as search conditions see it in memory: the record
// fields the store keeps beside it (id, project, time) and the search
// fields Fields computes, on first use. Access-policy criteria and
// subscription criteria are checked against a Doc with store.Matches, the
// semantics every adapter's search is held to, so a resource that a
// search would find is the one a criteria check accepts.
type Doc struct {
	Type, ID, Project string
	LastUpdated       time.Time

	raw     []byte
	content map[string]any
	fields  map[string]any
	err     error
}

// StoredDoc is a stored version, decoded only when a condition needs it.
func StoredDoc(typ, id, project string, ts time.Time, raw []byte) *Doc {
	return &Doc{Type: typ, ID: id, Project: project, LastUpdated: ts, raw: raw}
}

// ContentDoc is a resource already decoded (one about to be written).
func ContentDoc(typ, id, project string, ts time.Time, content map[string]any) *Doc {
	return &Doc{Type: typ, ID: id, Project: project, LastUpdated: ts, content: content}
}

// Content is the decoded resource.
func (d *Doc) Content() (map[string]any, error) {
	if d.content == nil && d.err == nil {
		if len(d.raw) == 0 {
			d.content = map[string]any{}
		} else {
			d.content, d.err = fhir.Decode(d.raw)
		}
	}
	return d.content, d.err
}

// Err is the error decoding the stored bytes met, if a condition needed
// them: an unreadable resource matched nothing.
func (d *Doc) Err() error { return d.err }

// Changed forgets the search fields after the content was changed in
// place.
func (d *Doc) Changed() { d.fields = nil }

// Field is the lookup store.Matches evaluates against.
func (d *Doc) Field(key string) (any, bool) {
	switch key {
	case store.FieldID:
		return d.ID, d.ID != ""
	case store.FieldProject:
		return d.Project, d.Project != ""
	case store.FieldTime:
		return d.LastUpdated, true
	}
	if d.fields == nil {
		m, err := d.Content()
		if err != nil {
			return nil, false // fails closed: an unreadable resource matches nothing
		}
		d.fields = Fields(d.Type, m)
	}
	v, ok := d.fields[key]
	return v, ok
}

// Matches reports whether the resource meets every condition of the
// query's filter (its paging, sort and presentation play no part).
func (q *Query) Matches(d *Doc) bool {
	for _, c := range q.Filter {
		if !store.Matches(c, d.Field) {
			return false
		}
	}
	return true
}
