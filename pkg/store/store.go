// Package store is the storage port: what Pinion needs of a database, in
// its own terms — resources with versions and history, searches, unique
// claims, the event outbox and private credentials. Adapters translate it:
// store/sqlstore (SQLite, the one-machine default) and store/mongostore
// (MongoDB, and FerretDB speaking its wire protocol). Nothing above an
// adapter knows which database it talks to; storetest holds the one suite
// every adapter passes.
package store

import (
	"context"
	"errors"
	"time"
)

// The errors every adapter returns, so callers map them to HTTP once.
var (
	// ErrNotFound: no such resource, version, claim or credential.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a conditional write found another version (or value)
	// than the one it expected.
	ErrConflict = errors.New("store: version conflict")
	// ErrExists: a create found the id (or key) taken.
	ErrExists = errors.New("store: already exists")
	// ErrTooComplex: the database refused a search for its shape (too
	// deep an expression, too many variables), not for its data. Searches
	// are bounded before they reach a store; this is the safety net.
	ErrTooComplex = errors.New("store: search too complex")
)

// Record is one version of a resource as stored.
type Record struct {
	Type    string
	ID      string
	Version string
	// Time is the version's lastUpdated, at millisecond precision, UTC.
	Time    time.Time
	Project string
	Deleted bool
	// JSON is the complete resource, id and meta included; empty when
	// Deleted.
	JSON []byte
}

// Write is one new version to store.
type Write struct {
	Record
	// Prev is the version this one replaces; "" creates the resource, and
	// finds ErrExists if the id is taken. A replace finds ErrConflict when
	// the current version is not Prev.
	Prev string
	// Fields are the search values (search.Fields): per key a string, a
	// float64, a time.Time, or a slice of strings or float64s. Times are
	// kept to the millisecond; an empty slice is no value.
	Fields map[string]any
	// Event is recorded in the outbox with the write, under OutboxID; nil
	// records none.
	Event []byte
	// Strict asks that no reader see the write before it is durable. Every
	// write is durable when Write returns; an adapter may let others read
	// it a moment sooner (the SQLite store, while it syncs), which a write
	// that grants or revokes access must not allow: a reader could act on
	// a grant that a power loss then undoes.
	Strict bool
}

// ExactSuffix ends the fields that hold values as written (search's
// :exact). A condition on one is always stated beside one on the
// normalised field it refines, which finds the resources: so a store may
// keep these only where a test of a known resource reads them, not in a
// value index (the SQLite store's search_exact table, by resource).
const ExactSuffix = "_exact"

// OutboxID names a version's event: the stream drops a second publish of it.
func OutboxID(typ, id, version string) string { return typ + "/" + id + "/" + version }

// Pending is an outbox event whose write is stored but which may not have
// been published.
type Pending struct {
	ID    string
	Event []byte
}

// Query is a search in store terms: the resources of one type that are not
// deleted, in Project ("" for every project), meeting Filter.
type Query struct {
	Project string
	Filter  []Cond // ANDed
	Sort    []Sort // empty: the adapter's stable order
	Offset  int
	Limit   int // at least 1 (the repository asks for a page and one more)
}

// Sort orders by a field: a search field (the smallest value ascending,
// the largest descending), or one of the record fields FieldID, FieldTime.
// A resource without the first sort's field comes last in either
// direction (as PostgreSQL puts NULLs last ascending, and so Medplum's
// ascending sorts), which lets an adapter walk that field's index and stop
// at the page; a later sort counts a missing field as its smallest value.
// Ties keep an order of the adapter's that stays the same from page to
// page.
type Sort struct {
	Field string
	Desc  bool
}

// The record's own fields, usable in conditions and sorts beside the
// search fields (which are named s_*).
const (
	FieldID      = "_id"
	FieldProject = "project"
	FieldTime    = "ts"
)

// Refields computes a resource's search fields from its JSON.
type Refields func(json []byte) (map[string]any, error)

// Store is the port. Every method is safe for concurrent use.
type Store interface {
	// Get returns the current version of a resource, deleted or not.
	Get(ctx context.Context, typ, id string) (*Record, error)
	// GetVersion returns one version from the history.
	GetVersion(ctx context.Context, typ, id, version string) (*Record, error)
	// History lists at most limit versions of a resource, newest first
	// (limit 0: all).
	History(ctx context.Context, typ, id string, limit int) ([]*Record, error)
	// Write stores new versions: history, current version, search values
	// and outbox event of each. See the adapter for what holds if one of
	// several fails; with a single write nothing is partly stored. A
	// deleted resource's id stays taken: a create of it is ErrExists; a
	// replace of a resource that does not exist is ErrConflict.
	Write(ctx context.Context, ws ...*Write) error
	// Search returns at most q.Limit records from q.Offset on.
	Search(ctx context.Context, typ string, q *Query) ([]*Record, error)
	// Count counts what Search would find without paging.
	Count(ctx context.Context, typ string, q *Query) (int, error)

	// Reindex brings the search fields of typ's current resources up to
	// version: if the store's fields of typ were computed by an older
	// version (a store that never recorded one holds version 1), it
	// recomputes them with fields, from each resource's JSON, and rewrites
	// the values that changed, in batches beside other writes; then it
	// records version. It answers how many resources it read; progress,
	// if not nil, hears the count after each batch.
	Reindex(ctx context.Context, typ string, version int, fields Refields, progress func(done int)) (int, error)

	// Claim reserves key for owner and returns the winner: the first claim
	// wins, later ones get its owner, and claiming again as the winner is a
	// no-op.
	Claim(ctx context.Context, key, owner string) (string, error)
	// ClaimOwner returns who holds key, or "".
	ClaimOwner(ctx context.Context, key string) (string, error)
	// Release frees key if owner still holds it.
	Release(ctx context.Context, key, owner string) error

	// Pending lists outbox events recorded before the given time whose
	// writes are stored, oldest first, at most 1000 at a time (an adapter
	// without transactions drops the ones whose writes never happened,
	// once they are older than abandon).
	Pending(ctx context.Context, before, abandon time.Time) ([]Pending, error)
	// ClearOutbox removes published events.
	ClearOutbox(ctx context.Context, ids []string) error

	// Secret returns a credential (password hash, client secret digest,
	// signing key): never searched, never in an event.
	Secret(ctx context.Context, key string) ([]byte, error)
	// SwapSecret replaces a credential if it still holds old: old nil means
	// it must not exist (ErrExists otherwise), and a different value is
	// ErrConflict. new nil deletes it.
	SwapSecret(ctx context.Context, key string, old, new []byte) error
	// SetSecret stores a credential whatever it held; nil deletes it.
	SetSecret(ctx context.Context, key string, value []byte) error

	// AppendTrail stores a block of a project's audit trail after the
	// trail's last: ErrExists when the trail already reaches b.First
	// (another writer took the place), and ErrConflict when b.First would
	// leave a gap after its end. An empty trail (retention removed all of
	// it) takes a block at any place.
	AppendTrail(ctx context.Context, b *TrailBlock) error
	// TrailBlock returns the project's block holding place seq: the one
	// with the greatest First not after seq (whose events may end before
	// seq: the caller checks). ErrNotFound when none starts at or before it.
	TrailBlock(ctx context.Context, project string, seq int64) (*TrailBlock, error)
	// LastTrailBlock returns the project's last block, ErrNotFound when
	// the trail is empty.
	LastTrailBlock(ctx context.Context, project string) (*TrailBlock, error)
	// TrailBlocks lists a project's blocks, as q asks.
	TrailBlocks(ctx context.Context, q *TrailQuery) ([]*TrailBlock, error)
	// TrailProjects lists the projects that have a trail ("" for the
	// server's own), in order.
	TrailProjects(ctx context.Context) ([]string, error)
	// PurgeTrail removes the project's events at or before place through:
	// the blocks that end by it, and the events of the block that holds
	// it, which then starts after it. It answers how many blocks it
	// removed or cut; run again after a crash, it finishes the work.
	PurgeTrail(ctx context.Context, project string, through int64) (int, error)

	// Close releases the database.
	Close() error
}

// TrailBlock is a run of a project's audit trail as its writer stored it
// in one write: the sealed AuditEvents (JSON) of places First on, with
// the keys that find them and the span of their times. Storing a run per
// write rather than a resource per event is what makes the trail cheap
// enough to record every read (docs/audit.md, "What it costs").
type TrailBlock struct {
	Project string
	First   int64
	Events  [][]byte
	// Keys are the block's search keys ("patient|Patient/1"): a block is
	// found by every key of any of its events.
	Keys     []string
	From, To time.Time // the earliest and latest recorded time of its events
}

// Last is the place of the block's last event.
func (b *TrailBlock) Last() int64 { return b.First + int64(len(b.Events)) - 1 }

// TrailQuery selects blocks of Project's trail (the server's own when
// ""): holding every one of Keys, overlapping [From, To] (zero: open);
// newest first, starting before place Before (0: anywhere), or oldest
// first when Ascending, ending after place After; at most Limit.
// Walking a trail page by page, each page's last block is the next
// page's bound.
type TrailQuery struct {
	Project   string
	Keys      []string
	From, To  time.Time
	Before    int64
	After     int64
	Ascending bool
	Limit     int
}
