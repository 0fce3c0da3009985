package sqlstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// TestCheckpointer: the WAL is copied back into the database file by the
// checkpointer, beside the writer: these few hundred pages are far below
// the writer's own threshold.
func TestCheckpointer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pinion.db")
	s, err := Open(context.Background(), path, Options{Sync: "normal", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	for i := range 200 {
		w := &store.Write{Record: store.Record{Type: "Patient", ID: fmt.Sprint(i), Version: "1", Time: time.Now().UTC(), Project: "p",
			JSON: []byte(`{"resourceType":"Patient"}`)}, Fields: benchFields(i)}
		if err := s.Write(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * checkpointEvery)
	for size() == before {
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes after %s: no checkpoint", before, 10*checkpointEvery)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
