package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// A store opened read-only beside the one that writes reads what that
// one committed, sees what it commits later, and refuses every write;
// one pointed at no store says so rather than making one.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pinion.db")
	if _, err := Open(ctx, path, Options{ReadOnly: true, Log: quiet}); err == nil {
		t.Fatal("a read-only open of no file succeeded")
	}
	s, err := Open(ctx, path, Options{Sync: "normal", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	put := func(id string) {
		t.Helper()
		w := &store.Write{Record: store.Record{Type: "Patient", ID: id, Version: "1", Time: at, Project: "p", JSON: []byte(`{"id":"` + id + `"}`)}}
		if err := s.Write(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	if err := s.SetSecret(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	ro, err := Open(ctx, path, Options{ReadOnly: true, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if r, err := ro.Get(ctx, "Patient", "a"); err != nil || r.Version != "1" {
		t.Fatalf("read-only Get: %+v %v", r, err)
	}
	if v, err := ro.Secret(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("read-only Secret: %q %v", v, err)
	}
	put("b")
	if _, err := ro.Get(ctx, "Patient", "b"); err != nil {
		t.Fatalf("a write committed after the read-only open: %v", err)
	}
	for what, err := range map[string]error{
		"Write":     ro.Write(ctx, &store.Write{Record: store.Record{Type: "Patient", ID: "c", Version: "1", Time: at, JSON: []byte(`{}`)}}),
		"SetSecret": ro.SetSecret(ctx, "k", []byte("w")),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only store: %v", what, err)
		}
	}
	if v, _ := s.Secret(ctx, "k"); string(v) != "v" {
		t.Fatalf("the secret became %q", v)
	}
}
