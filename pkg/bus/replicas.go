package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Replicated is js with every stream and key-value bucket it creates or
// updates kept on n servers (PINION_NATS_REPLICAS): one place for the
// setting, whichever package declares the stream. A stream or bucket that
// exists with fewer replicas is updated to n when its owner opens it at
// start; a server that cannot (a cluster smaller than n) is named in the
// error.
func Replicated(js jetstream.JetStream, n int) jetstream.JetStream {
	if n <= 1 {
		return js
	}
	return &replicated{JetStream: js, n: n}
}

type replicated struct {
	jetstream.JetStream
	n int
}

func (r *replicated) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = r.n
	s, err := r.JetStream.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stream %s with %d replicas (PINION_NATS_REPLICAS): %w", cfg.Name, r.n, err)
	}
	return s, nil
}

func (r *replicated) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = r.n
	kv, err := r.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bucket %s with %d replicas (PINION_NATS_REPLICAS): %w", cfg.Bucket, r.n, err)
	}
	return kv, nil
}
