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

// A one-time value is spent once: the second taker, or one that read an
// older revision, gets false; an entry that is not its type reads as none.
func TestEntryAndSpend(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "spend"})
	if err != nil {
		t.Fatal(err)
	}
	type challenge struct{ Value string }
	if _, err := kv.Put(ctx, "c", []byte(`{"Value":"x"}`)); err != nil {
		t.Fatal(err)
	}
	c, rev, err := kvcas.Entry[challenge](ctx, kv, "c")
	if err != nil || c == nil || c.Value != "x" || rev == 0 {
		t.Fatalf("entry %+v %d %v", c, rev, err)
	}
	if ok, err := kvcas.Spend(ctx, kv, "c", rev); err != nil || !ok {
		t.Fatalf("first spend: %v %v", ok, err)
	}
	if ok, err := kvcas.Spend(ctx, kv, "c", rev); err != nil || ok {
		t.Fatalf("second spend: %v %v", ok, err)
	}
	if c, _, err := kvcas.Entry[challenge](ctx, kv, "c"); err != nil || c != nil {
		t.Fatalf("a spent entry reads %+v %v", c, err)
	}
	// Changed since it was read: not spent.
	rev1, _ := kv.Put(ctx, "d", []byte(`{"Value":"1"}`))
	if _, err := kv.Put(ctx, "d", []byte(`{"Value":"2"}`)); err != nil {
		t.Fatal(err)
	}
	if ok, err := kvcas.Spend(ctx, kv, "d", rev1); err != nil || ok {
		t.Fatalf("a changed entry spent: %v %v", ok, err)
	}
	if _, err := kv.Put(ctx, "e", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if c, _, err := kvcas.Entry[challenge](ctx, kv, "e"); err != nil || c != nil {
		t.Fatalf("a foreign entry reads %+v %v", c, err)
	}
}
