package resource

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// AsyncJob is the AsyncJob of a bulk export or of a bot run asked to
// respond async: its status and, in output, its progress or answer.
// Elements Pinion does not set (an extension, an identifier a member
// added) are kept in Other and written back as they were.
//
// Decoding is lenient, as reading the job as a map was: a value of the
// wrong kind reads as absent rather than failing the job.
type AsyncJob struct {
	ResourceType    string          `json:"resourceType"`
	ID              string          `json:"id,omitempty"`
	Meta            json.RawMessage `json:"meta,omitempty"`
	Status          string          `json:"status"`
	RequestTime     string          `json:"requestTime,omitempty"`
	TransactionTime string          `json:"transactionTime,omitempty"`
	Request         string          `json:"request"`
	Output          *Parameters     `json:"output,omitempty"`
	// Other holds the job's other elements, as written.
	Other map[string]json.RawMessage `json:"-"`
}

// asyncJobFields is AsyncJob without its methods, for the default coding.
type asyncJobFields AsyncJob

// MarshalJSON writes the job's elements and the others it was read with.
func (j AsyncJob) MarshalJSON() ([]byte, error) {
	return marshalWith(asyncJobFields(j), j.Other)
}

// UnmarshalJSON reads the job's elements and keeps the others.
func (j *AsyncJob) UnmarshalJSON(b []byte) error {
	other, err := unmarshalWith(b, (*asyncJobFields)(j))
	j.Other = other
	return err
}

// Parameters is a FHIR Parameters resource with the value kinds Pinion
// writes: an export's files and cursor, a bot's answer, or an outcome.
type Parameters struct {
	ResourceType string      `json:"resourceType"`
	Parameter    []Parameter `json:"parameter"`
}

// Parameter is one Parameters.parameter, or one of its parts.
type Parameter struct {
	Name         string   `json:"name"`
	ValueCode    string   `json:"valueCode,omitempty"`
	ValueURI     string   `json:"valueUri,omitempty"`
	ValueString  string   `json:"valueString,omitempty"`
	ValueInteger *Integer `json:"valueInteger,omitempty"`
	// Resource is a resource as JSON: a failed export's outcome, or a
	// bot's.
	Resource json.RawMessage `json:"resource,omitempty"`
	Part     []Parameter     `json:"part,omitempty"`
}

// Text is the parameter's value as text, whichever text kind holds it.
func (p *Parameter) Text() string {
	switch {
	case p.ValueCode != "":
		return p.ValueCode
	case p.ValueURI != "":
		return p.ValueURI
	}
	return p.ValueString
}

// Int is the parameter's integer value, 0 when it has none.
func (p *Parameter) Int() int {
	if p.ValueInteger == nil {
		return 0
	}
	return int(*p.ValueInteger)
}

// Integer is a FHIR integer that reads any JSON number form of a whole
// number (12, 12.0, 1.2e1); anything else reads as 0, as a value of the
// wrong kind reads as absent.
type Integer int64

// IntegerOf is a pointer to n, for optional integer elements.
func IntegerOf(n int) *Integer { i := Integer(n); return &i }

// UnmarshalJSON reads a whole number in any JSON form.
func (i *Integer) UnmarshalJSON(b []byte) error {
	var n json.Number
	if len(b) == 0 || b[0] == '"' || json.Unmarshal(b, &n) != nil {
		*i = 0
		return nil
	}
	if v, err := n.Int64(); err == nil {
		*i = Integer(v)
		return nil
	}
	if f, err := n.Float64(); err == nil && f == float64(int64(f)) {
		*i = Integer(f)
		return nil
	}
	*i = 0
	return nil
}

// marshalWith writes known's elements and, beside them, other's.
func marshalWith(known any, other map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(known)
	if err != nil || len(other) == 0 {
		return b, err
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	for k, v := range other {
		if _, ok := all[k]; !ok {
			all[k] = v
		}
	}
	return json.Marshal(all)
}

// unmarshalWith reads b into the struct known points to, a value of the
// wrong kind left absent, and returns the elements known has no field for.
func unmarshalWith(b []byte, known any) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	var kind *json.UnmarshalTypeError
	if err := json.Unmarshal(b, known); err != nil && !errors.As(err, &kind) {
		return nil, err
	}
	t := reflect.TypeOf(known).Elem()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		delete(all, name)
	}
	if len(all) == 0 {
		return nil, nil
	}
	return all, nil
}
