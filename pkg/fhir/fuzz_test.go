package fhir

import (
	"errors"
	"testing"
)

// FuzzPatch feeds arbitrary JSON Patch bodies and documents: parsing and
// applying never panic, and every refusal is a 400 OperationOutcome.
func FuzzPatch(f *testing.F) {
	f.Add([]byte(`[{"op":"replace","path":"/admin","value":true}]`), []byte(`{"resourceType":"ProjectMembership","admin":false}`))
	f.Add([]byte(`[{"op":"add","path":"/name/-","value":{"family":"x"}}]`), []byte(`{"name":[]}`))
	f.Add([]byte(`[{"op":"move","from":"/a","path":"/b"}]`), []byte(`{"a":1}`))
	f.Add([]byte(`[{"op":"test","path":"/a~1b","value":1}]`), []byte(`{"a/b":1}`))
	f.Add([]byte(`{"op":"add"}`), []byte(`{}`))
	f.Add([]byte(`[]`), []byte(`{}`))
	f.Add([]byte(`[{"op":"copy","from":"/a","path":"/a/b"}]`), []byte(`{"a":{}}`))
	f.Fuzz(func(t *testing.T, patch, doc []byte) {
		p, err := ParsePatch(patch)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("refusal is not a 400: %v", err)
			}
			return
		}
		if _, err := ApplyPatch(p, doc); err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("failed apply is not a 400: %v", err)
			}
		}
	})
}

// FuzzDecode: any body is either a JSON object or a 400, never a panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"resourceType":"Patient"}`))
	f.Add([]byte(`[[[[[[[[`))
	f.Add([]byte(`{"a":"\"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Decode(b); err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != 400 {
				t.Fatalf("not a 400: %v", err)
			}
		}
	})
}
