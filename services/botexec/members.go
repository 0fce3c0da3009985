package botexec

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// botMemberships keeps the session entries of the memberships bots run
// as, so that a run needs no read of the bucket: that read was a second
// NATS round trip on every $execute, beside the request itself.
//
// It is exactly as fresh as the gateway that forwarded the request: the
// gateway names the newest memberships revision its view has applied
// (session.AppliedHeader), and an entry is used only once this copy has
// applied as much. A deactivation or a new access policy the gateway had
// applied is therefore seen by the next run, however soon it follows.
// Without that revision (a subscription's run, a bot run by a bot) or when
// the watcher falls behind, the bucket is read, as before.
//
// The watcher only invalidates: a write to a kept key drops it, and the
// next run reads the bucket again. A read that races a write is used for
// its own run but not kept: a placeholder goes in before the read, and
// the write's removal of it tells the read not to fill it.
type botMemberships struct {
	// read reads an entry from the bucket (the session store's
	// GetMembership).
	read func(ctx context.Context, id string) (*session.Membership, error)

	mu      sync.Mutex
	entries *lru.Cache[string, *memberEntry]
	applied uint64        // newest bucket revision the watcher has seen
	changed chan struct{} // closed and replaced when applied moves
	stopped bool          // the watcher ended: every run reads the bucket
	cancel  context.CancelFunc
}

// memberEntry is one membership's entry, or its absence (m nil), once
// read; a placeholder (ready false) while a read is under way.
type memberEntry struct {
	m     *session.Membership
	ready bool
}

// appliedWait bounds the wait for the watcher to reach the gateway's
// revision; past it the bucket is read.
const appliedWait = 500 * time.Millisecond

// maxBotMemberships bounds the entries kept (one per bot that runs).
const maxBotMemberships = 10_000

// watchBotMemberships starts the watcher and returns once the bucket's
// existing keys have been seen, so that applied is its revision then.
func watchBotMemberships(ctx context.Context, js jetstream.JetStream, sessions *session.Store) (*botMemberships, error) {
	kv, err := js.KeyValue(ctx, session.MembershipsBucket)
	if err != nil {
		return nil, err
	}
	entries, err := lru.New[string, *memberEntry](maxBotMemberships)
	if err != nil {
		return nil, err
	}
	// Every write up to the bucket's revision now is in the watch's first
	// replay or superseded by one that is: once the replay is done, the
	// watch has applied that much, even when the newest message is gone
	// (a gateway that watched before this service started may name it).
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		last = bs.StreamInfo().State.LastSeq
	}
	wctx, cancel := context.WithCancel(context.Background())
	// Keys and revisions only: a write invalidates, it is never applied.
	w, err := kv.WatchAll(wctx, jetstream.MetaOnly())
	if err != nil {
		cancel()
		return nil, err
	}
	bm := &botMemberships{read: sessions.GetMembership, entries: entries, changed: make(chan struct{}), cancel: cancel}
	ready := make(chan struct{})
	go bm.watch(wctx, w, last, ready)
	select {
	case <-ready:
		return bm, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

func (bm *botMemberships) watch(ctx context.Context, w jetstream.KeyWatcher, last uint64, ready chan struct{}) {
	defer w.Stop()
	replayed := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				bm.mu.Lock()
				bm.stopped = true
				close(bm.changed) // waiters read the bucket now
				bm.mu.Unlock()
				if !replayed {
					close(ready) // the service starts; its runs read the bucket
				}
				return
			}
			rev := last // nil: the existing keys are seen (said once)
			if e != nil {
				rev = e.Revision()
			}
			bm.mu.Lock()
			if e != nil {
				bm.entries.Remove(e.Key())
			}
			if rev > bm.applied {
				bm.applied = rev
				close(bm.changed)
				bm.changed = make(chan struct{})
			}
			bm.mu.Unlock()
			if e == nil && !replayed {
				replayed = true
				close(ready)
			}
		}
	}
}

// stop ends the watcher.
func (bm *botMemberships) stop() { bm.cancel() }

// waitApplied reports whether the watcher reached rev within appliedWait.
func (bm *botMemberships) waitApplied(ctx context.Context, rev uint64) bool {
	var timeout <-chan time.Time
	for {
		bm.mu.Lock()
		done, stopped, ch := bm.applied >= rev, bm.stopped, bm.changed
		bm.mu.Unlock()
		switch {
		case stopped:
			return false
		case done:
			return true
		case timeout == nil:
			timer := time.NewTimer(appliedWait)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// get returns a membership's entry as fresh as the gateway's view at
// revision atLeast (0: as the bucket holds it now). A membership without
// an entry is session.ErrNotFound. The entry returned is shared: never
// changed by its readers.
func (bm *botMemberships) get(ctx context.Context, id string, atLeast uint64) (*session.Membership, error) {
	if atLeast == 0 || !bm.waitApplied(ctx, atLeast) {
		return bm.read(ctx, id)
	}
	bm.mu.Lock()
	e, ok := bm.entries.Get(id)
	if ok && e.ready {
		bm.mu.Unlock()
		if e.m == nil {
			return nil, session.ErrNotFound
		}
		return e.m, nil
	}
	var placeholder *memberEntry
	if !ok {
		placeholder = &memberEntry{}
		bm.entries.Add(id, placeholder)
	}
	bm.mu.Unlock()
	m, err := bm.read(ctx, id)
	if placeholder == nil {
		return m, err // another run's read will fill the entry
	}
	bm.mu.Lock()
	defer bm.mu.Unlock()
	if cur, ok := bm.entries.Peek(id); ok && cur == placeholder {
		switch {
		case err == nil:
			*placeholder = memberEntry{m: m, ready: true}
		case errors.Is(err, session.ErrNotFound):
			*placeholder = memberEntry{ready: true}
		default:
			bm.entries.Remove(id)
		}
	}
	return m, err
}

// appliedRevision is the gateway's revision a request carries; 0 when it
// carries none or one that does not parse.
func appliedRevision(r *bus.Request) uint64 {
	if r == nil {
		return 0
	}
	rev, err := strconv.ParseUint(r.Get(session.AppliedHeader), 10, 64)
	if err != nil {
		return 0
	}
	return rev
}
