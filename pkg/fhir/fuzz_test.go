package fhir

import (
	"errors"
	"strings"
	"testing"
)

// FuzzPatch feeds arbitrary JSON Patch bodies and documents: parsing and
// applying never panic, every refusal is a 400 (or a 413 for a patch that
// is too big or grows the document too much), and a result never exceeds
// the document, the patch and the copy allowance together.
func FuzzPatch(f *testing.F) {
	f.Add([]byte(`[{"op":"replace","path":"/admin","value":true}]`), []byte(`{"resourceType":"ProjectMembership","admin":false}`))
	f.Add([]byte(`[{"op":"add","path":"/name/-","value":{"family":"x"}}]`), []byte(`{"name":[]}`))
	f.Add([]byte(`[{"op":"move","from":"/a","path":"/b"}]`), []byte(`{"a":1}`))
	f.Add([]byte(`[{"op":"test","path":"/a~1b","value":1}]`), []byte(`{"a/b":1}`))
	f.Add([]byte(`{"op":"add"}`), []byte(`{}`))
	f.Add([]byte(`[]`), []byte(`{}`))
	f.Add([]byte(`[{"op":"copy","from":"/a","path":"/a/b"}]`), []byte(`{"a":{}}`))
	doubling := `[{"op":"add","path":"/a","value":["` + strings.Repeat("x", 1000) + `"]}`
	for i := 0; i < 20; i++ {
		doubling += `,{"op":"copy","from":"/a","path":"/a/-"}`
	}
	f.Add([]byte(doubling+"]"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, patch, doc []byte) {
		p, err := ParsePatch(patch)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != 400 && fe.Status != 413 {
				t.Fatalf("refusal is not a 400 or 413: %v", err)
			}
			return
		}
		out, err := ApplyPatch(p, doc)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != 400 && fe.Status != 413 {
				t.Fatalf("failed apply is not a 400 or 413: %v", err)
			}
			return
		}
		// Serialising may escape characters (<, >, & as \u003c: six bytes for one).
		if len(out) > 6*(len(doc)+len(patch))+MaxPatchCopyBytes {
			t.Fatalf("patched document of %d bytes from %d + %d", len(out), len(doc), len(patch))
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
