package gateway

import (
	"errors"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// FuzzDecodeBody feeds arbitrary bodies and Content-Encoding headers to the
// decoder: it must never panic, never answer more than the limit, and
// refuse only with 400, 413 or 415.
func FuzzDecodeBody(f *testing.F) {
	f.Add("gzip", gzipped([]byte(`{"resourceType":"Patient"}`)))
	f.Add("gzip, gzip", bomb())
	f.Add("deflate", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	f.Add("br", []byte{0x0b, 0x02, 0x80, 0x7b, 0x7d, 0x03})
	f.Add("identity", []byte("plain"))
	f.Add("x-gzip,br", []byte{0x1f, 0x8b})
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, header string, raw []byte) {
		out, err := decodeBody([]string{header}, raw, max)
		if err != nil {
			var fe *fhir.Error
			if !errors.As(err, &fe) || (fe.Status != 400 && fe.Status != 413 && fe.Status != 415) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(out) > max && len(out) != len(raw) {
			t.Fatalf("decoded %d bytes, over the limit", len(out))
		}
	})
}
