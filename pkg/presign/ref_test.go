package presign

import "testing"

func TestBinaryID(t *testing.T) {
	const base = "https://pinion.example/"
	cases := []struct {
		name, url, id string
		ok            bool
	}{
		{"reference", "Binary/b1", "b1", true},
		{"versioned reference", "Binary/b1/_history/v2", "b1", true},
		{"absolute", base + "fhir/R4/Binary/b1", "b1", true},
		{"signed storage URL", base + "storage/b1/v2?Expires=1&Signature=x", "b1", true},
		{"storage URL of another server", "https://elsewhere.example/storage/b1/v2?Expires=1&Signature=x", "", false},
		{"another type", "Patient/p1", "", false},
		{"a reference with more path", "Binary/b1/x", "", false},
		{"empty", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, ok := BinaryID(base, c.url)
			if id != c.id && c.ok || ok != c.ok {
				t.Fatalf("%q %v, want %q %v", id, ok, c.id, c.ok)
			}
		})
	}
}
