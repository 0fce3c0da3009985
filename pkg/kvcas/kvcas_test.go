package kvcas_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// Each compare-and-set write at a stale revision, on a real embedded
// server, is a conflict; other failures are not.
func TestConflict(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cas"})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	_, createErr := kv.Create(ctx, "k", []byte("3"))
	_, updateErr := kv.Update(ctx, "k", []byte("3"), rev)
	deleteErr := kv.Delete(ctx, "k", jetstream.LastRevision(rev))
	for name, err := range map[string]error{"create": createErr, "update": updateErr, "delete": deleteErr} {
		if !kvcas.Conflict(err) {
			t.Errorf("%s at a stale revision: %v is not a conflict", name, err)
		}
	}
	_, getErr := kv.Get(ctx, "missing")
	for _, err := range []error{nil, getErr, errors.New("connection lost")} {
		if kvcas.Conflict(err) {
			t.Errorf("%v is a conflict", err)
		}
	}
}
