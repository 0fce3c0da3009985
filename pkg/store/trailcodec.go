package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A trail block's events are kept one after another, each after its
// length (a uvarint), compressed with zstd (klauspost/compress, which
// NATS already brings): a read event is some 900 bytes of JSON, most of
// it the same codings in every event, and written uncompressed the
// database's log cost the writer more than all else it did. Lengths, not
// a JSON array: a block is split without scanning its JSON. Every
// adapter keeps blocks so.

var (
	zEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		return e
	})
	zDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxTrailBlock))
		return d
	})
)

// maxTrailBlock bounds a block's events once decompressed.
const maxTrailBlock = 64 << 20

// EncodeTrail writes a block's events as stored.
func EncodeTrail(events [][]byte) []byte {
	n := 0
	for _, e := range events {
		n += binary.MaxVarintLen64 + len(e)
	}
	raw := make([]byte, 0, n)
	for _, e := range events {
		raw = binary.AppendUvarint(raw, uint64(len(e)))
		raw = append(raw, e...)
	}
	return zEncoder().EncodeAll(raw, nil)
}

// DecodeTrail reads a block's events as EncodeTrail wrote them, each
// exactly as it was given.
func DecodeTrail(data []byte) ([][]byte, error) {
	raw, err := zDecoder().DecodeAll(data, nil)
	if err != nil {
		return nil, fmt.Errorf("store: a trail block: %w", err)
	}
	var out [][]byte
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || n > uint64(len(raw)-k) {
			return nil, errors.New("store: a trail block: cut short")
		}
		out = append(out, raw[k:k+int(n):k+int(n)])
		raw = raw[k+int(n):]
	}
	return out, nil
}
