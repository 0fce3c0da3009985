package sqlstore

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
)

// Acknowledged once the WAL is on disk, without the writer waiting for it.
//
// With synchronous=FULL, SQLite syncs the WAL inside each COMMIT, and the
// writer, the one connection that writes, waits for the disk before it
// starts the next transaction. So in "full" mode the writer's connection
// runs synchronous=NORMAL (SQLite then syncs only around checkpoints, as
// FULL does too) and the store syncs the WAL itself, on a goroutine of its
// own: a caller is answered once a sync begun after its commit has ended,
// and meanwhile the writer runs the calls that queued into the next
// transaction, keeping it open until that sync ends (grow, in writer.go).
// A transaction then holds what queued during one sync, as when the
// writer waited, but the writer works instead of waiting.
//
// So what a caller is told is stored survives a power loss, as before. What
// differs: another connection may read a committed write in the
// milliseconds before it is synced and its writer answered; a power loss in
// that window loses it, and its writer was never told it was stored. A
// failed sync leaves the WAL's state on disk unknown (the kernel may have
// dropped the pages it could not write), so the store then refuses every
// write, as PostgreSQL stops on a failed fsync.

// An ack is a committed call's answer, sent after the next sync.
type ack struct {
	done chan error
}

type syncer struct {
	wal  string // the WAL's path
	f    *os.File
	log  *slog.Logger
	in   chan []ack
	done chan struct{}

	mu      sync.Mutex
	pending int           // batches handed over and not yet answered
	idle    chan struct{} // closed when pending falls to 0; nil while 0

	failed atomic.Pointer[error]
	// hold, in tests, runs before each sync.
	hold func()
	once sync.Once
}

func startSyncer(dbPath string, log *slog.Logger) (*syncer, error) {
	s := &syncer{wal: dbPath + "-wal", log: log, in: make(chan []ack, 64), done: make(chan struct{})}
	if err := s.open(); err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

// open opens the WAL file, which SQLite keeps while any connection is open.
func (s *syncer) open() error {
	f, err := os.Open(s.wal)
	if err != nil {
		return fmt.Errorf("sqlstore: open the WAL to sync it: %w", err)
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f = f
	return nil
}

// err is the sync failure that stopped the store's writes, or nil.
func (s *syncer) err() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// answer hands a committed transaction's calls to the syncer, which
// answers them after its next sync.
func (s *syncer) answer(acks []ack) {
	s.mu.Lock()
	s.pending++
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	s.mu.Unlock()
	s.in <- acks
}

// syncing is closed when every transaction handed over is synced and
// answered; nil when that is already so.
func (s *syncer) syncing() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle
}

func (s *syncer) run() {
	defer close(s.done)
	var batch []ack
	for acks := range s.in {
		n := 1
		batch = append(batch[:0], acks...)
	more:
		for {
			select {
			case next, ok := <-s.in:
				if !ok {
					break more
				}
				batch = append(batch, next...)
				n++
			default:
				break more
			}
		}
		err := s.sync()
		for _, a := range batch {
			a.done <- err
		}
		clear(batch)
		s.mu.Lock()
		if s.pending -= n; s.pending == 0 {
			close(s.idle)
			s.idle = nil
		}
		s.mu.Unlock()
	}
}

// sync makes everything written to the WAL so far durable. The file SQLite
// writes is checked to be the one open here: were it replaced, a sync of
// the old one would be a sync of nothing.
func (s *syncer) sync() error {
	if err := s.err(); err != nil {
		return err
	}
	if s.hold != nil {
		s.hold()
	}
	err := func() error {
		now, err := os.Stat(s.wal)
		if err != nil {
			return err
		}
		if open, err := s.f.Stat(); err != nil || !os.SameFile(now, open) {
			if err := s.open(); err != nil {
				return err
			}
		}
		return datasync(s.f)
	}()
	if err != nil {
		err = fmt.Errorf("sqlstore: syncing the WAL failed, writes are refused until a restart: %w", err)
		s.failed.CompareAndSwap(nil, &err)
		s.log.Error("sqlstore: WAL sync failed", "err", err)
		return s.err()
	}
	return nil
}

// close answers what is queued and stops; the writer has stopped sending.
func (s *syncer) close() {
	s.once.Do(func() {
		close(s.in)
		<-s.done
		s.f.Close()
	})
}
