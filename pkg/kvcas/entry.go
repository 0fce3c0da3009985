package kvcas

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Entry reads a bucket's JSON entry and its revision: nil when there is
// none, or it is not a T (an entry of another version, say, counts as
// none).
func Entry[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var v T
	if json.Unmarshal(e.Value(), &v) != nil {
		return nil, 0, nil
	}
	return &v, e.Revision(), nil
}

// Spend deletes key if it is still at revision rev: the way a one-time
// value (a challenge, a sign-in's state) is taken once. false when another
// request spent or changed it first.
func Spend(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) (bool, error) {
	err := kv.Delete(ctx, key, jetstream.LastRevision(rev))
	if err == nil {
		return true, nil
	}
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyNotFound) || Conflict(err) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return false, nil
	}
	return false, err
}
