package sqlstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	eventually(t, "a checkpoint to grow the database file", func() bool { return size() != before })
}

// TestWALRestartsUnderLoad: with writes committing back to back, no pass
// of the checkpointer leaves the WAL all copied at the start of a
// transaction, so SQLite does not start it again; asked to, the writer
// finishes the checkpoint and the WAL starts again from its beginning.
func TestWALRestartsUnderLoad(t *testing.T) {
	s := openFull(t)
	s.ckpt.halt() // its passes are the test's
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := []byte(fmt.Sprintf(`{"resourceType":"Patient","text":%q}`, strings.Repeat("x", 16<<10))) // five pages a write
	const writers = 32                                                                               // enough that the writer never waits for one
	errs := make(chan error, writers)
	for g := range writers {
		go func() {
			for i := 0; ctx.Err() == nil; i++ {
				w := patientWrite(fmt.Sprintf("g%d-%d", g, i))
				w.JSON = body
				if err := s.Write(ctx, w); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var long int
	eventually(t, "a WAL long enough to restart", func() bool {
		long, _ = s.ckpt.pass()
		return long >= 2*restartFrames
	})
	if !s.ckpt.once(true) {
		t.Fatal("the checkpointer did not ask for a restart")
	}
	eventually(t, "the WAL started again", func() bool {
		frames, ok := s.ckpt.pass()
		if frames > writerAutoCheckpoint/2 {
			t.Fatalf("the WAL grew to %d frames without starting again", frames)
		}
		return ok && frames < long/2
	})
	cancel()
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// eventually is testenv.Eventually, which this package's tests cannot
// import (testenv opens a store): it polls cond until it holds, for 10 s at
// most.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(pause)
	}
}
