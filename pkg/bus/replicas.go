package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Replicated is js with every stream and key-value bucket it creates or
// updates kept on n servers (PINION_NATS_REPLICAS): one place for the
// setting, whichever package declares the stream. A stream or bucket that
// exists with fewer replicas is updated to n when its owner opens it at
// start; a server that cannot (a cluster smaller than n) is named in the
// error.
func Replicated(js jetstream.JetStream, n int, log *slog.Logger) jetstream.JetStream {
	if n <= 1 {
		return js
	}
	if log == nil {
		log = slog.Default()
	}
	return &replicated{JetStream: js, n: n, log: log}
}

type replicated struct {
	jetstream.JetStream
	n   int
	log *slog.Logger
}

func (r *replicated) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = r.n
	var s jetstream.Stream
	err := r.patiently(ctx, func(ctx context.Context) (err error) {
		s, err = r.JetStream.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s with %d replicas (PINION_NATS_REPLICAS): %w", cfg.Name, r.n, err)
	}
	return s, nil
}

func (r *replicated) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = r.n
	err := r.patiently(ctx, func(ctx context.Context) error {
		_, err := r.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s with %d replicas (PINION_NATS_REPLICAS): %w", cfg.Bucket, r.n, err)
	}
	var kv jetstream.KeyValue
	err = r.patiently(ctx, func(ctx context.Context) (err error) {
		kv, err = r.leaderReads(ctx, cfg.Bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// patiently runs a stream or bucket change, trying again when it times
// out or finds too few servers: a cluster's servers agree on each one, and
// when a whole deployment starts at once (every process declaring the same
// streams) some requests go unanswered (seen on nats-server 2.15) while a
// later one succeeds at once. A server that has just joined is also not
// offered for placement until the meta leader has its first statistics
// ("no suitable peers for placement, peer offline"). Each try waits twice
// as long as the one before: 2 s to 16 s.
func (r *replicated) patiently(ctx context.Context, f func(context.Context) error) error {
	wait := 2 * time.Second
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, wait)
		err := f(tctx)
		cancel()
		unanswered, noPeers := errors.Is(err, context.DeadlineExceeded), isNoPeers(err)
		if !(unanswered || noPeers) || ctx.Err() != nil || try == 4 {
			return err
		}
		r.log.Warn("a JetStream stream change did not go through; trying again", "try", try, "err", err)
		if noPeers {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(wait / 2):
			}
		}
		wait *= 2
	}
}

// isNoPeers reports the cluster's answer that a server it needs for the
// replicas asked for is offline (JetStream error 10005 with that reason).
// A cluster with fewer servers than replicas gives the same code without
// the reason, and is reported at once.
func isNoPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10005 && strings.Contains(apiErr.Description, "offline")
}

// leaderReads binds a bucket whose reads go to its stream's leader. The
// client library creates buckets with direct gets, which every replica
// answers, and a follower may not yet hold a write the leader has
// acknowledged: a login issued a moment ago would read as absent (a 401
// for a fresh token). Without direct gets a read goes to the leader,
// which has every acknowledged write. The library turns direct gets back
// on whenever a process (re)creates the bucket at start, so the setting is
// checked again after binding.
func (r *replicated) leaderReads(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	for try := 0; ; try++ {
		s, err := r.JetStream.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return nil, err
		}
		if c := s.CachedInfo().Config; c.AllowDirect {
			c.AllowDirect = false
			if _, err := r.JetStream.UpdateStream(ctx, c); err != nil {
				return nil, fmt.Errorf("turning off direct gets: %w", err)
			}
		}
		kv, err := r.JetStream.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, err
		}
		if !st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.AllowDirect || try == 4 {
			return kv, nil
		}
	}
}
