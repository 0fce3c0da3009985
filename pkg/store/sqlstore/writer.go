package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit limits: one transaction takes at most this many queued
// calls, or calls until their payload passes maxBatchBytes, so a burst does
// not hold the write lock, or the WAL, unboundedly. A call of more than
// heavyBytes (a transaction Bundle of many entries) runs in a transaction
// of its own, so that the small calls queued beside it do not wait for it.
const (
	maxBatch      = 256
	maxBatchBytes = 8 << 20
	heavyBytes    = 256 << 10
	queueLen      = 1024 // callers beyond this block (on their ctx)
)

// The states of a queued call; the caller and the writer race to move it
// out of queued, and the winner decides whether it runs.
const (
	queued int32 = iota
	taken
	cancelled
)

// op is one caller's write: run executes it inside a shared transaction,
// perhaps more than once (when another call of the transaction fails, the
// others run again), so it must not consume what it captured.
type op struct {
	ctx  context.Context
	key  string // whose write it is (the project): turns are taken per key
	size int
	// strict: readable only once durable (durable.go), for writes that
	// grant or revoke access.
	strict bool
	run    func(*wconn) error
	state  atomic.Int32
	done   chan error // buffered: the writer never waits for the caller
}

// wconn is the writer's connection and its statements, prepared once (the
// driver keeps a single statement compiled between uses). A pragma is not
// among them: SQLite applies it when compiling (wconn.pragma).
type wconn struct {
	ctx  context.Context // the writer's own: a caller's cancellation must not interrupt a shared transaction
	conn *sql.Conn

	begin, commit, rollback *sql.Stmt

	insHistory, insResource, updResource, selSearch, clearEvent *sql.Stmt
	selExact, delExact                                          *sql.Stmt
	args, exactArgs                                             []any      // putFields' buffers
	shapes                                                      *stmtCache // dropRows' and putFields' statements

	// The ids of the names the search table keeps as numbers (schema
	// version 5): names holds those committed, pending those first
	// stored by the open transaction, which a rollback takes back (and
	// SQLite may then give their ids to other names).
	selName, insName *sql.Stmt
	names, pending   map[string]int64

	claimIns, claimOwner, claimDel *sql.Stmt

	secret, setSecret, delSecret, insSecret, updSecret *sql.Stmt
}

func newWconn(ctx context.Context, conn *sql.Conn) (*wconn, error) {
	c := &wconn{ctx: context.Background(), conn: conn, names: map[string]int64{}, pending: map[string]int64{}}
	c.shapes = newStmtCache(conn.PrepareContext, maxShapes)
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{
		{&c.begin, "BEGIN IMMEDIATE"},
		{&c.commit, "COMMIT"},
		{&c.rollback, "ROLLBACK"},
		{&c.insHistory, "INSERT INTO history(rid, version, ts, project, deleted, json, event, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"},
		{&c.insResource, "INSERT INTO resources(type, id, version, ts, project, deleted, json) VALUES (?, ?, ?, ?, ?, ?, ?)"},
		{&c.updResource, "UPDATE resources SET version = ?, ts = ?, project = ?, deleted = ?, json = ? WHERE type = ? AND id = ? AND version = ? RETURNING rid"},
		{&c.selSearch, "SELECT k.name, s.value, p.name FROM search s JOIN names k ON k.id = s.key JOIN names p ON p.id = s.project WHERE s.rid = ?"},
		{&c.selName, "SELECT id FROM names WHERE name = ?"},
		{&c.insName, "INSERT INTO names(name) VALUES (?) RETURNING id"},
		{&c.selExact, "SELECT key, value FROM search_exact WHERE rid = ?"},
		{&c.delExact, "DELETE FROM search_exact WHERE rid = ? AND key = ? AND value = ?"},
		{&c.clearEvent, "UPDATE history SET event = NULL, at = NULL WHERE rid = (SELECT rid FROM resources WHERE type = ? AND id = ?) AND version = ? AND event IS NOT NULL"},
		{&c.claimIns, "INSERT OR IGNORE INTO claims(key, owner) VALUES (?, ?)"},
		{&c.claimOwner, "SELECT owner FROM claims WHERE key = ?"},
		{&c.claimDel, "DELETE FROM claims WHERE key = ? AND owner = ?"},
		{&c.secret, "SELECT value FROM secrets WHERE key = ?"},
		{&c.setSecret, "INSERT INTO secrets(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"},
		{&c.delSecret, "DELETE FROM secrets WHERE key = ?"},
		{&c.insSecret, "INSERT INTO secrets(key, value) VALUES (?, ?)"},
		{&c.updSecret, "UPDATE secrets SET value = ? WHERE key = ?"},
	} {
		st, err := conn.PrepareContext(ctx, p.q)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("sqlstore: prepare %q: %w", p.q, err)
		}
		*p.st = st
	}
	return c, nil
}

func (c *wconn) close() {
	for _, st := range []*sql.Stmt{c.begin, c.commit, c.rollback,
		c.insHistory, c.insResource, c.updResource, c.selSearch, c.clearEvent, c.selExact, c.delExact, c.selName, c.insName,
		c.claimIns, c.claimOwner, c.claimDel, c.secret, c.setSecret, c.delSecret, c.insSecret, c.updSecret} {
		if st != nil {
			st.Close()
		}
	}
	c.shapes.close()
	c.conn.Close()
}

// pragma sets a pragma. It is not prepared once: SQLite applies a
// pragma's setting when it compiles the statement, not when it runs it.
func (c *wconn) pragma(setting string) error {
	_, err := c.conn.ExecContext(c.ctx, "PRAGMA "+setting)
	return err
}

// execText runs SQL built for this call, prepared once per shape.
func (c *wconn) execText(text string, args []any) error {
	var err error
	if st := c.shapes.get(c.ctx, text); st != nil {
		_, err = st.ExecContext(c.ctx, args...)
	} else {
		_, err = c.conn.ExecContext(c.ctx, text, args...)
	}
	return err
}

func (c *wconn) exec(st *sql.Stmt) error {
	_, err := st.ExecContext(c.ctx)
	return err
}

// maxNames bounds the ids kept in memory; past it they are read again.
const maxNames = 100_000

// nameID is name's id in the names table, which it is added to if new.
func (c *wconn) nameID(name string) (int64, error) {
	if id, ok := c.names[name]; ok {
		return id, nil
	}
	if id, ok := c.pending[name]; ok {
		return id, nil
	}
	var id int64
	err := c.selName.QueryRowContext(c.ctx, name).Scan(&id)
	if err == nil {
		// Not added by this transaction (pending would have it): committed.
		c.remember(name, id)
		return id, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if err := c.insName.QueryRowContext(c.ctx, name).Scan(&id); err != nil {
		return 0, err
	}
	c.pending[name] = id
	return id, nil
}

// beginTx begins a transaction; pending names are those of a transaction
// that did not commit.
func (c *wconn) beginTx() error {
	clear(c.pending)
	return c.exec(c.begin)
}

// commitTx commits the open transaction, and with it its new names.
func (c *wconn) commitTx() error {
	if err := c.exec(c.commit); err != nil {
		return err
	}
	for name, id := range c.pending {
		c.remember(name, id)
	}
	clear(c.pending)
	return nil
}

// remember keeps a committed name's id, up to maxNames of them.
func (c *wconn) remember(name string, id int64) {
	if len(c.names) >= maxNames {
		clear(c.names)
	}
	c.names[name] = id
}

// writer runs every write of the store on one connection.
type writer struct {
	c       *wconn
	log     *slog.Logger
	durable *syncer // answers commits once synced; nil unless sync is full
	queue   *fairQueue
	quit    chan struct{}
	stopped chan struct{}
	// mu orders Close after every send in flight: senders hold it shared
	// while sending, so once Close has set closed, nothing more arrives
	// and the writer can drain the queue and stop.
	mu     sync.RWMutex
	closed bool
	once   sync.Once
	txs    atomic.Int64 // transactions begun, for tests and metrics
	taken  atomic.Int64 // calls taken into transactions, likewise
	// carry is a strict call grow took from the queue but may not run in
	// a pipelined transaction: the next transaction starts with it.
	// Only the writer's goroutine touches it.
	carry *op
	// restart asks the writer to finish a checkpoint (checkpoint.go).
	restart atomic.Bool
}

// askRestart has the writer finish the checkpointer's passes before its
// next transaction, so that the WAL starts again (checkpoint.go).
func (w *writer) askRestart() { w.restart.Store(true) }

// restartWAL copies what was written since the checkpointer's last pass,
// if it asked: little, as the pass has just ended. The transaction after
// it then finds every frame copied, and SQLite starts the WAL again unless
// a reader still holds an older snapshot. SQLite syncs the WAL before it
// copies and the database after, as in any checkpoint, so what was
// acknowledged stays as durable as before.
func (w *writer) restartWAL() {
	if !w.restart.CompareAndSwap(true, false) {
		return
	}
	start := time.Now()
	busy, frames, copied, err := checkpoint(w.c.ctx, w.c.conn)
	if err != nil {
		w.log.Warn("sqlstore: the writer's checkpoint failed", "err", err)
		return
	}
	if busy {
		// Another checkpoint holds the lock (a pass, a backup): try again
		// after the next transaction, at the cost of a lock's test.
		w.restart.Store(true)
		return
	}
	w.log.Debug("sqlstore: the writer finished a checkpoint", "took", time.Since(start), "frames", frames, "copied", copied)
}

func newWriter(ctx context.Context, conn *sql.Conn, durable *syncer, log *slog.Logger) (*writer, error) {
	c, err := newWconn(ctx, conn)
	if err != nil {
		return nil, err
	}
	w := &writer{
		c:       c,
		log:     log,
		durable: durable,
		queue:   newFairQueue(queueLen),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go w.loop()
	return w, nil
}

// do queues run, a write of key's (a project, "" for the store's own),
// and waits for its transaction to commit and be durable; a strict write
// is also readable only once durable. A caller whose ctx ends before
// the writer takes its call gets ctx.Err() and nothing of it is stored;
// once taken, the call is committed or failed as a whole and the caller
// learns which. A nil writer (Options.ReadOnly) refuses every call.
func (w *writer) do(ctx context.Context, key string, size int, strict bool, run func(*wconn) error) error {
	if w == nil {
		return ErrReadOnly // a store opened ReadOnly has no writer
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{ctx: ctx, key: key, size: size, strict: strict, run: run, done: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	err := w.queue.push(ctx, o)
	w.mu.RUnlock()
	if err != nil {
		return err
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		if o.state.CompareAndSwap(queued, cancelled) {
			return ctx.Err()
		}
		// Already running: its outcome is decided shortly.
		return <-o.done
	}
}

func (w *writer) close() {
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.quit)
		<-w.stopped
		w.c.close()
		if w.durable != nil {
			w.durable.close() // after the writer: it answers what the writer handed it
		}
	})
}

func (w *writer) loop() {
	defer close(w.stopped)
	batch := make([]*op, 0, maxBatch)
	for {
		select {
		case <-w.queue.ready:
		case <-w.quit:
			// No sender remains (see mu): drain what is queued.
			for w.queue.len() > 0 || w.carry != nil {
				w.commit(w.gather(batch[:0]))
			}
			return
		}
		for w.queue.len() > 0 || w.carry != nil {
			w.restartWAL()
			w.commit(w.gather(batch[:0]))
		}
	}
}

// gather takes the next transaction's calls from the queue, without
// waiting: a lone caller pays no latency, and callers that queue while a
// commit is under way share the next one. Calls come a project at a time,
// in turn, and a heavy call goes alone: a quiet project's write waits
// for at most one call of each busy project, not for all they queued.
func (w *writer) gather(batch []*op) []*op {
	size := 0
	if o := w.carry; o != nil {
		w.carry = nil
		batch = append(batch, o)
		if size = o.size; size > heavyBytes {
			return batch
		}
	}
	for len(batch) < maxBatch && size < maxBatchBytes {
		o := w.queue.pop(len(batch) == 0)
		if o == nil {
			break
		}
		batch = append(batch, o)
		size += o.size
		if o.size > heavyBytes {
			break
		}
	}
	return batch
}

// fairQueue holds the calls waiting for the writer, a queue per key,
// handed out a key at a time in turn (round robin), at most limit in all.
type fairQueue struct {
	mu    sync.Mutex
	byKey map[string][]*op
	turns []string      // keys with calls queued, the next first
	n     int           // calls queued
	ready chan struct{} // signalled when a call is queued
	slots chan struct{} // one per queued call: senders wait when full
}

func newFairQueue(limit int) *fairQueue {
	return &fairQueue{byKey: map[string][]*op{}, ready: make(chan struct{}, 1), slots: make(chan struct{}, limit)}
}

// push queues o, waiting on ctx while the queue is full.
func (q *fairQueue) push(ctx context.Context, o *op) error {
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	q.mu.Lock()
	if len(q.byKey[o.key]) == 0 {
		q.turns = append(q.turns, o.key)
	}
	q.byKey[o.key] = append(q.byKey[o.key], o)
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// pop takes the next key's first call, or nil when none is queued; a
// heavy call is taken only as the first of a transaction (first).
func (q *fairQueue) pop(first bool) *op {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.turns) == 0 {
		return nil
	}
	key := q.turns[0]
	calls := q.byKey[key]
	o := calls[0]
	if !first && o.size > heavyBytes {
		return nil
	}
	calls[0] = nil
	q.turns = q.turns[1:]
	if calls = calls[1:]; len(calls) > 0 {
		q.byKey[key] = calls
		q.turns = append(q.turns, key)
	} else {
		delete(q.byKey, key)
	}
	q.n--
	<-q.slots
	return o
}

func (q *fairQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// commit runs the calls of batch that are still wanted in transactions,
// answering each caller.
func (w *writer) commit(batch []*op) {
	live := batch[:0]
	for _, o := range batch {
		if !o.state.CompareAndSwap(queued, taken) {
			continue // the caller gave up and has returned
		}
		if err := o.ctx.Err(); err != nil {
			o.done <- err
			continue
		}
		live = append(live, o)
	}
	w.taken.Add(int64(len(live)))
	for len(live) > 0 {
		n := w.tx(live)
		live = live[n:]
	}
	clear(batch) // drop references to callers' closures
}

// errAborted wraps the error that made SQLite roll a whole transaction
// back (disk full, I/O error): every call in it failed.
var errAborted = errors.New("sqlstore: transaction aborted")

// tx runs calls in one transaction and answers them (a failing call is
// answered alone and the others run again without it), with the calls grow
// adds while a sync is under way. It returns how many of calls it
// answered.
func (w *writer) tx(calls []*op) int {
	c := w.c
	start := time.Now()
	if w.durable != nil {
		if err := w.durable.err(); err != nil {
			for _, o := range calls {
				o.done <- err
			}
			return len(calls)
		}
	}
	// Pipelined: committed with SQLite's normal and answered after the
	// store's own sync (durable.go). A transaction with a strict call is
	// committed with full instead, which syncs before the commit becomes
	// readable, and answered at once.
	pipelined := w.durable != nil && !slices.ContainsFunc(calls, func(o *op) bool { return o.strict })
	if w.durable != nil && !pipelined {
		if err := c.pragma("synchronous = FULL"); err != nil {
			w.log.Error("sqlstore: strict sync", "err", err)
			for _, o := range calls {
				o.done <- err
			}
			return len(calls)
		}
		defer func() {
			if err := c.pragma("synchronous = NORMAL"); err != nil {
				// Harmless but slower: later commits sync too.
				w.log.Error("sqlstore: back to normal sync", "err", err)
			}
		}()
	}
	w.txs.Add(1)
	if err := c.beginTx(); err != nil {
		w.log.Error("sqlstore: begin", "err", err)
		for _, o := range calls {
			o.done <- err
		}
		return len(calls)
	}
	if len(calls) == 1 && !pipelined {
		// Alone in its transaction: on failure it is rolled back whole.
		err := calls[0].run(c)
		if err == nil {
			if err = c.commitTx(); err != nil {
				w.log.Error("sqlstore: commit", "err", err)
				err = fmt.Errorf("%w: %w", errAborted, err)
			}
		}
		if err != nil {
			_ = c.exec(c.rollback) // fails harmlessly when SQLite already rolled back
		}
		calls[0].done <- err
		return 1
	}
	// Many calls run without savepoints (each would cost the writer two
	// more statements, every one parsed): the first that fails is answered
	// with its error, the transaction rolled back, and the others run again
	// without it in a fresh one. What each call sees is what it would have
	// seen with savepoints: a failed call leaves nothing behind.
	orig := len(calls)
	if pipelined {
		calls = slices.Clone(calls) // grow appends to it
	}
	results := make([]error, len(calls))
	pending := make([]int, len(calls)) // indexes of the calls still to store
	for i := range pending {
		pending[i] = i
	}
	first := true
	for len(pending) > 0 {
		if !first {
			if err := c.beginTx(); err != nil {
				for _, i := range pending {
					results[i] = err
				}
				break
			}
		}
		first = false
		failed := -1
		for k, i := range pending {
			if err := calls[i].run(c); err != nil {
				results[i], failed = err, k
				break
			}
		}
		if failed < 0 && pipelined {
			failed = w.grow(&calls, &results, &pending)
		}
		if failed < 0 {
			if err := c.commitTx(); err != nil {
				_ = c.exec(c.rollback)
				w.log.Error("sqlstore: write transaction failed", "err", err, "calls", len(pending))
				for _, i := range pending {
					results[i] = fmt.Errorf("%w: %w", errAborted, err)
				}
			}
			break
		}
		_ = c.exec(c.rollback) // fails harmlessly when SQLite already rolled back
		pending = append(pending[:failed], pending[failed+1:]...)
	}
	w.answer(calls, results, pipelined)
	if d := time.Since(start); d > time.Second {
		w.log.Warn("sqlstore: slow write transaction", "calls", len(calls), "took", d)
	}
	return orig
}

// grow runs more queued calls in the open transaction while the previous
// transaction's sync is under way (durable.go): the transaction then
// commits what queued during that sync, as it would have had the writer
// waited for the sync, and the writer worked meanwhile. It returns the
// index in pending of a call that failed, or -1. The calls it adds are
// appended to calls, results and pending.
func (w *writer) grow(calls *[]*op, results *[]error, pending *[]int) int {
	size := 0
	for _, o := range *calls {
		size += o.size
	}
	for len(*calls) < maxBatch && size < maxBatchBytes {
		wait := w.durable.syncing()
		if wait == nil {
			return -1
		}
		o := w.queue.pop(false)
		if o == nil {
			select {
			case <-wait:
				return -1
			case <-w.queue.ready:
			}
			continue
		}
		if o.strict {
			// Not readable before durable: it starts the next transaction.
			w.carry = o
			return -1
		}
		if !o.state.CompareAndSwap(queued, taken) {
			continue // the caller gave up and has returned
		}
		if err := o.ctx.Err(); err != nil {
			o.done <- err
			continue
		}
		w.taken.Add(1)
		*calls = append(*calls, o)
		*results = append(*results, nil)
		*pending = append(*pending, len(*calls)-1)
		size += o.size
		if err := o.run(w.c); err != nil {
			(*results)[len(*calls)-1] = err
			return len(*pending) - 1
		}
	}
	return -1
}

// answer tells each call its outcome: a failure at once, a success once it
// is durable (durable.go: after the syncer's next sync when pipelined).
func (w *writer) answer(calls []*op, results []error, pipelined bool) {
	var acks []ack
	for i, o := range calls {
		if results[i] != nil || !pipelined {
			o.done <- results[i]
			continue
		}
		acks = append(acks, ack{o.done})
	}
	if len(acks) > 0 {
		w.durable.answer(acks)
	}
}
