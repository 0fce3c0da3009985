package sqlstore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

func openFull(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), Options{Log: quiet}) // full, the default
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.w.durable == nil {
		t.Fatal("sync full does not sync the WAL itself")
	}
	return s
}

func patientWrite(id string) *store.Write {
	return &store.Write{Record: store.Record{Type: "Patient", ID: id, Version: "1", Time: time.Now(), Project: "p", JSON: []byte("{}")},
		Fields: map[string]any{"s_g": "g"}}
}

// A write is answered only after a sync of the WAL that began after its
// commit has ended; meanwhile the writer runs the writes that queue, in a
// transaction it commits when that sync ends.
func TestAnsweredOnceSynced(t *testing.T) {
	s := openFull(t)
	ctx := context.Background()
	syncing, release := make(chan struct{}, 16), make(chan struct{})
	s.w.durable.hold = func() { syncing <- struct{}{}; <-release }
	first := make(chan error, 1)
	go func() { first <- s.Write(ctx, patientWrite("a")) }()
	select {
	case <-syncing:
	case <-time.After(10 * time.Second):
		t.Fatal("no sync began for a committed write")
	}
	// Committed (readable), not yet answered.
	if _, err := s.Get(ctx, "Patient", "a"); err != nil {
		t.Fatalf("the committed write is not readable: %v", err)
	}
	// The writer takes the next writes into an open transaction while
	// the sync is under way.
	const n = 5
	txs, taken := s.w.txs.Load(), s.w.taken.Load()
	more := make(chan error, n)
	for i := range n {
		go func() { more <- s.Write(ctx, patientWrite("m"+string(rune('0'+i)))) }()
	}
	eventually(t, "the writer to take the writes queued during the sync", func() bool { return s.w.taken.Load() >= taken+n })
	select {
	case err := <-first:
		t.Fatalf("answered (%v) before its sync ended", err)
	case err := <-more:
		t.Fatalf("a later write answered (%v) before any sync after it", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-more; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.w.txs.Load() - txs; got != 1 {
		t.Errorf("the writes queued during one sync took %d transactions, want 1", got)
	}
}

// After a failed sync nothing more is acknowledged: what is on disk is
// unknown.
func TestFailedSyncRefusesWrites(t *testing.T) {
	s := openFull(t)
	ctx := context.Background()
	wal := s.w.durable.wal
	s.w.durable.wal = filepath.Join(t.TempDir(), "gone-wal") // the next sync fails
	err := s.Write(ctx, patientWrite("a"))
	if err == nil || !strings.Contains(err.Error(), "sync") {
		t.Fatalf("a write whose sync failed answered %v", err)
	}
	s.w.durable.wal = wal
	if err := s.Write(ctx, patientWrite("b")); err == nil {
		t.Fatal("a write after a failed sync was acknowledged")
	}
}

// A strict write (one that grants or revokes access) is committed with
// synchronous=FULL, so SQLite syncs the WAL before any reader can see it,
// and it never joins a pipelined transaction: not even one grown while an
// earlier write's sync is held.
func TestStrictCommitsFull(t *testing.T) {
	s := openFull(t)
	ctx := context.Background()
	level := func(c *wconn) (int, error) {
		var n int
		err := c.conn.QueryRowContext(c.ctx, "PRAGMA synchronous").Scan(&n)
		return n, err
	}
	syncing, release := make(chan struct{}, 16), make(chan struct{})
	s.w.durable.hold = func() { syncing <- struct{}{}; <-release }
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the store's Close, which waits for the syncer
	first := make(chan error, 1)
	go func() { first <- s.Write(ctx, patientWrite("a")) }()
	select {
	case <-syncing:
	case <-time.After(10 * time.Second):
		t.Fatal("no sync began for a committed write")
	}
	// While a's sync is held, a plain write opens a grown transaction and
	// a strict one queues behind it.
	plain := make(chan error, 1)
	go func() {
		plain <- s.w.do(ctx, "p", 0, false, func(c *wconn) error {
			if n, err := level(c); err != nil || n != 1 {
				return fmt.Errorf("a pipelined write ran at synchronous %d (%v), want 1 (normal)", n, err)
			}
			return nil
		})
	}()
	eventually(t, "the writer to take the plain write", func() bool { return s.w.taken.Load() >= 2 })
	txs := s.w.txs.Load()
	strict := make(chan error, 1)
	go func() {
		strict <- s.w.do(ctx, "p", 0, true, func(c *wconn) error {
			if n, err := level(c); err != nil || n != 2 {
				return fmt.Errorf("a strict write ran at synchronous %d (%v), want 2 (full)", n, err)
			}
			return nil
		})
	}()
	// The strict write is answered by its own commit, not after the held
	// sync, and in a transaction of its own.
	select {
	case err := <-strict:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a strict write waited for another write's pipelined sync")
	}
	if got := s.w.txs.Load() - txs; got != 1 {
		t.Errorf("the strict write took %d transactions after the plain one's, want 1", got)
	}
	select {
	case err := <-first:
		t.Fatalf("a pipelined write answered (%v) before its sync ended", err)
	default:
	}
	unhold()
	for _, ch := range []chan error{first, plain} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	// After the strict transaction the writer is back to normal.
	if err := s.w.do(ctx, "p", 0, false, func(c *wconn) error {
		if n, err := level(c); err != nil || n != 1 {
			return fmt.Errorf("after a strict write, synchronous is %d (%v), want 1", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
