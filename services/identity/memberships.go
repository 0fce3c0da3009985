package identity

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

// clientMemberships keeps the session entries of the memberships clients
// authenticate as, so a client token needs no bucket read (a round trip
// to the stream was a sixth of a token's CPU, issue 39).
//
// It is exactly as fresh as the gateway that forwards the request: the
// gateway names the newest memberships revision its view has applied
// (session.AppliedHeader), and an entry is used only once this copy has
// applied as much. A removal or a deactivation the gateway already
// answered (it waits for its view) is therefore seen here too. Without
// that revision (a request that did not come through a gateway) or when
// the watcher falls behind, the bucket is read as before.
//
// The watcher only invalidates: any write to a cached key drops it, and
// the next request reads the bucket again. A read races a write safely: a
// placeholder goes in before the read, the write removes it, and the read
// is then used for its own request but not kept.
type clientMemberships struct {
	sessions *session.Store

	mu      sync.Mutex
	entries *lru.Cache[string, *memberEntry]
	applied uint64        // newest bucket revision the watcher has seen
	changed chan struct{} // closed and replaced when applied moves
	stopped bool          // the watcher ended: every request reads the bucket
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

// watchMemberships starts the watcher; it returns once the bucket's
// existing keys have been seen, so applied is the bucket's revision then.
func watchMemberships(ctx context.Context, js jetstream.JetStream, sessions *session.Store, size int) (*clientMemberships, error) {
	kv, err := js.KeyValue(ctx, session.MembershipsBucket)
	if err != nil {
		return nil, err
	}
	entries, err := lru.New[string, *memberEntry](size)
	if err != nil {
		return nil, err
	}
	// Every write up to the bucket's revision now is in the watch's first
	// replay or superseded by one that is: the watch has applied that much
	// once the replay is done, even if the newest message is gone since.
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
	cm := &clientMemberships{sessions: sessions, entries: entries, changed: make(chan struct{}), cancel: cancel}
	ready := make(chan struct{})
	go cm.watch(wctx, w, last, ready)
	select {
	case <-ready:
		return cm, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

func (cm *clientMemberships) watch(ctx context.Context, w jetstream.KeyWatcher, last uint64, ready chan struct{}) {
	defer w.Stop()
	replayed := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				cm.mu.Lock()
				cm.stopped = true
				close(cm.changed) // waiters read the bucket now
				cm.mu.Unlock()
				if !replayed {
					close(ready) // the service starts; its tokens read the bucket
				}
				return
			}
			rev := last
			if e != nil {
				rev = e.Revision()
			}
			cm.mu.Lock()
			if e != nil {
				cm.entries.Remove(e.Key())
			}
			if rev > cm.applied {
				cm.applied = rev
				close(cm.changed)
				cm.changed = make(chan struct{})
			}
			cm.mu.Unlock()
			if e == nil && !replayed { // the existing keys are seen
				replayed = true
				close(ready)
			}
		}
	}
}

// stop ends the watcher.
func (cm *clientMemberships) stop() { cm.cancel() }

// waitApplied reports whether the watcher reached rev within appliedWait.
func (cm *clientMemberships) waitApplied(ctx context.Context, rev uint64) bool {
	var timeout <-chan time.Time
	for {
		cm.mu.Lock()
		done, stopped, ch := cm.applied >= rev, cm.stopped, cm.changed
		cm.mu.Unlock()
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
// an entry is session.ErrNotFound.
func (cm *clientMemberships) get(ctx context.Context, id string, atLeast uint64) (*session.Membership, error) {
	if atLeast == 0 || !cm.waitApplied(ctx, atLeast) {
		return cm.sessions.GetMembership(ctx, id)
	}
	cm.mu.Lock()
	e, ok := cm.entries.Get(id)
	if ok && e.ready {
		cm.mu.Unlock()
		if e.m == nil {
			return nil, session.ErrNotFound
		}
		return e.m, nil
	}
	var placeholder *memberEntry
	if !ok {
		placeholder = &memberEntry{}
		cm.entries.Add(id, placeholder)
	}
	cm.mu.Unlock()
	m, err := cm.sessions.GetMembership(ctx, id)
	if placeholder == nil {
		return m, err // another request's read will fill the entry
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cur, ok := cm.entries.Peek(id); ok && cur == placeholder {
		switch {
		case err == nil:
			*placeholder = memberEntry{m: m, ready: true}
		case errors.Is(err, session.ErrNotFound):
			*placeholder = memberEntry{ready: true}
		default:
			cm.entries.Remove(id)
		}
	}
	return m, err
}

// appliedRevision is the gateway's revision a request carries; 0 when it
// carries none or one that does not parse.
func appliedRevision(r *bus.Request) uint64 {
	rev, err := strconv.ParseUint(r.Get(session.AppliedHeader), 10, 64)
	if err != nil {
		return 0
	}
	return rev
}
