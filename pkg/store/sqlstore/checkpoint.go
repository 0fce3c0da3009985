package sqlstore

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"
)

// Checkpoints run beside the writer, not in it.
//
// SQLite's automatic checkpoint runs inside the commit that crosses its
// threshold: that commit copies the whole WAL into the database and waits
// for the disk, and every write queued behind it waits too — a create's
// p99 was six times its p50 (issue 38). A PASSIVE checkpoint on a
// connection of its own copies the same pages while the writer goes on
// appending to the WAL, and readers go on reading.
//
// That alone never lets the WAL start again from its beginning: SQLite
// restarts it only when a write transaction begins with every frame copied
// and synced, and under a steady load the writer has always appended more
// by the time a pass is done. At 100,000 Patients and 16 clients the WAL
// then grew by some 40,000 frames a second until the writer's automatic
// checkpoint fired after all, stalling a commit for 80–150 ms every second
// or two: the p99 of an update was six times its p50.
//
// So the WAL is started again on purpose, at most every restartEvery: the
// checkpointer runs passes until one finds little new, and then asks the
// writer to copy that little itself between two transactions (restartWAL
// in writer.go), so that its next transaction starts the WAL again. That
// copy waits for two syncs, 20–40 ms under such a load: done every second
// it delayed more than one write in a hundred. The writer's automatic
// checkpoint stays as the bound should the checkpointer ever fall behind.
// The WAL's file keeps the length it reached (160,000 frames, 640 MiB, in
// that test) until the store is closed: cut back at each restart, it would
// be extended again within seconds (docs/decisions/storage.md).

// checkpointEvery is how often the checkpointer copies the WAL back: about
// as often as the 8,000-page threshold used to fire under a steady load of
// creates, so each page written repeatedly is still copied once per
// checkpoint, not once per write.
const checkpointEvery = time.Second

// The WAL is started again when it holds restartFrames or more, at most
// every restartEvery; the writer's own bound is writerAutoCheckpoint (1
// GiB of 4 KiB pages).
const (
	restartFrames        = 4096
	restartEvery         = 4 * time.Second
	writerAutoCheckpoint = 262144
)

// A restart's passes stop when one finds fewer than settledFrames new
// frames, or after maxPasses.
const (
	settledFrames = 1000
	maxPasses     = 4
)

type checkpointer struct {
	db *sql.DB
	// restart asks the writer to finish the checkpoint, starting the WAL
	// again.
	restart func()
	log     *slog.Logger
	stop    chan struct{}
	done    chan struct{}
	halted  sync.Once
}

// startCheckpointer opens the checkpointer's connection to path and starts
// it.
func startCheckpointer(ctx context.Context, path, sync string, restart func(), log *slog.Logger) (*checkpointer, error) {
	// synchronous applies to the checkpoint's own writes: with full, the
	// database file is synced before the WAL may be reused.
	db, err := sql.Open("sqlite", dsn(path, "busy_timeout(0)", "synchronous("+sync+")"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	c := &checkpointer{db: db, restart: restart, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *checkpointer) run() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	last := time.Now() // the last restart asked for
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if c.once(time.Since(last) >= restartEvery) {
				last = time.Now()
			}
		}
	}
}

// once copies what the WAL holds that no reader still needs. When a
// restart is due and the WAL is long enough to be worth starting again, it
// goes on until a pass finds little new and asks the writer to finish; it
// reports whether it asked.
func (c *checkpointer) once(due bool) bool {
	prev := -1
	for range maxPasses {
		frames, ok := c.pass()
		if !ok || !due || frames < restartFrames {
			return false
		}
		if prev >= 0 && frames-prev < settledFrames {
			break
		}
		prev = frames
	}
	c.restart()
	return true
}

// pass runs one PASSIVE checkpoint and reports the WAL's length in
// frames; ok is false when it did not run. PASSIVE takes no lock a writer
// or reader waits for; a busy answer only means another checkpoint (the
// writer's, a backup) was running.
func (c *checkpointer) pass() (frames int, ok bool) {
	start := time.Now()
	busy, frames, copied, err := checkpoint(context.Background(), c.db)
	if err != nil {
		c.log.Warn("sqlstore: checkpoint failed", "err", err)
		return 0, false
	}
	c.log.Debug("sqlstore: checkpoint pass", "took", time.Since(start), "frames", frames, "copied", copied, "busy", busy)
	return frames, !busy
}

// checkpoint runs a PASSIVE checkpoint on db (the checkpointer's pool or
// the writer's connection): busy when another checkpoint held the lock,
// frames the WAL's length, copied how many of them are in the database.
func checkpoint(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (busy bool, frames, copied int, err error) {
	var b int
	err = db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&b, &frames, &copied)
	return b != 0, frames, copied, err
}

// halt stops the passes every checkpointEvery; a test then runs them.
func (c *checkpointer) halt() {
	c.halted.Do(func() {
		close(c.stop)
		<-c.done
	})
}

func (c *checkpointer) close() error {
	c.halt()
	return c.db.Close()
}
