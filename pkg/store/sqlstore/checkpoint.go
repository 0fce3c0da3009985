package sqlstore

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// Checkpoints run beside the writer, not in it.
//
// SQLite's automatic checkpoint runs inside the commit that crosses its
// threshold: that commit copies the whole WAL into the database and waits
// for the disk, and every write queued behind it waits too — a create's
// p99 was six times its p50 (issue 38). A PASSIVE checkpoint on a
// connection of its own copies the same pages while the writer goes on
// appending to the WAL, and readers go on reading. The writer keeps an
// automatic checkpoint far above what the checkpointer lets the WAL reach,
// as a bound should the checkpointer ever fall behind.

// checkpointEvery is how often the checkpointer copies the WAL back: about
// as often as the 8,000-page threshold used to fire under a steady load of
// creates, so each page written repeatedly is still copied once per
// checkpoint, not once per write.
const checkpointEvery = time.Second

// writerAutoCheckpoint is the writer's own threshold, in pages (256 MiB).
const writerAutoCheckpoint = 64000

type checkpointer struct {
	db   *sql.DB
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
}

// startCheckpointer opens the checkpointer's connection to path and starts
// it.
func startCheckpointer(ctx context.Context, path, sync string, log *slog.Logger) (*checkpointer, error) {
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
	c := &checkpointer{db: db, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *checkpointer) run() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.once()
		}
	}
}

// once copies what the WAL holds that no reader still needs. PASSIVE
// takes no lock a writer or reader waits for; a busy answer only means
// another checkpoint (the writer's bound, a backup) was running.
func (c *checkpointer) once() {
	var busy, frames, copied int
	err := c.db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	if err != nil {
		c.log.Warn("sqlstore: checkpoint failed", "err", err)
	}
}

func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
