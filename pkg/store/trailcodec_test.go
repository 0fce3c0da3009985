package store

import (
	"bytes"
	"testing"
)

// Events come back exactly as given, however many and however large;
// a block cut short or not compressed is an error, never a partial list.
func TestTrailCodec(t *testing.T) {
	for _, events := range [][][]byte{
		{[]byte(`{}`)},
		{[]byte(`{"a":"é \u003c"}`), bytes.Repeat([]byte("x"), 300), []byte(`[]`)},
		make([][]byte, 512),
	} {
		for i := range events {
			if events[i] == nil {
				events[i] = bytes.Repeat([]byte{byte('a' + i%26)}, i)
			}
		}
		got, err := DecodeTrail(EncodeTrail(events))
		if err != nil || len(got) != len(events) {
			t.Fatalf("%d events: %d back, %v", len(events), len(got), err)
		}
		for i := range events {
			if !bytes.Equal(got[i], events[i]) {
				t.Fatalf("event %d: %q, want %q", i, got[i], events[i])
			}
		}
	}
	whole := zEncoder().EncodeAll([]byte{0x05, 'a', 'b'}, nil) // says 5 bytes, holds 2
	if _, err := DecodeTrail(whole); err == nil {
		t.Fatal("a block cut short decoded")
	}
	if _, err := DecodeTrail([]byte("not compressed")); err == nil {
		t.Fatal("an uncompressed block decoded")
	}
}
