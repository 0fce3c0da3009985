package session

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"
)

// MemberCache keeps membership entries a service reads on every request
// (the identity service a client's at each token, botexec a bot's at each
// run), so that a request needs no read of the bucket: that read was a
// second NATS round trip beside the request itself (a sixth of a token's
// CPU, issue 39).
//
// It is exactly as fresh as the gateway that forwarded the request: the
// gateway names the newest memberships revision its view has applied
// (AppliedHeader), and a kept entry is used only once this copy has
// applied as much. A removal, a deactivation or a new access policy the
// gateway has applied is therefore seen by the next request, however soon
// it follows. Without that revision (a request that did not come through
// a gateway: a subscription's run, a bot run by a bot) or when the watcher
// falls behind, the bucket is read, as without a cache.
//
// The watcher only invalidates: a write to a kept key drops it, and the
// next request reads the bucket again. A read that races a write is used
// for its own request but not kept: a placeholder goes in before the read,
// and the write's removal of it tells the read not to fill it.
type MemberCache struct {
	// read reads an entry from the bucket (Store.GetMembership).
	read func(ctx context.Context, id string) (*Membership, error)

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
	m     *Membership
	ready bool
}

// appliedWait bounds the wait for the watcher to reach the gateway's
// revision; past it the bucket is read.
const appliedWait = 500 * time.Millisecond

// WatchMembers starts a cache of at most size entries read from s. It
// returns once the bucket's existing keys have been seen, so that applied
// is the bucket's revision then.
func WatchMembers(ctx context.Context, js jetstream.JetStream, s *Store, size int) (*MemberCache, error) {
	kv, err := js.KeyValue(ctx, MembershipsBucket)
	if err != nil {
		return nil, err
	}
	entries, err := lru.New[string, *memberEntry](size)
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
	c := &MemberCache{read: s.GetMembership, entries: entries, changed: make(chan struct{}), cancel: cancel}
	ready := make(chan struct{})
	go c.watch(wctx, w, last, ready)
	select {
	case <-ready:
		return c, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

func (c *MemberCache) watch(ctx context.Context, w jetstream.KeyWatcher, last uint64, ready chan struct{}) {
	defer w.Stop()
	replayed := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				c.mu.Lock()
				c.stopped = true
				close(c.changed) // waiters read the bucket now
				c.mu.Unlock()
				if !replayed {
					close(ready) // the service starts; its requests read the bucket
				}
				return
			}
			rev := last // nil: the existing keys are seen
			if e != nil {
				rev = e.Revision()
			}
			c.mu.Lock()
			if e != nil {
				c.entries.Remove(e.Key())
			}
			if rev > c.applied {
				c.applied = rev
				close(c.changed)
				c.changed = make(chan struct{})
			}
			c.mu.Unlock()
			if e == nil && !replayed {
				replayed = true
				close(ready)
			}
		}
	}
}

// Stop ends the watcher.
func (c *MemberCache) Stop() { c.cancel() }

// waitApplied reports whether the watcher reached rev within appliedWait.
func (c *MemberCache) waitApplied(ctx context.Context, rev uint64) bool {
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		done, stopped, ch := c.applied >= rev, c.stopped, c.changed
		c.mu.Unlock()
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

// Get returns a membership's entry as fresh as the gateway's view at
// revision atLeast (0: as the bucket holds it now). A membership without
// an entry is ErrNotFound. The entry returned is shared: never changed by
// its readers.
func (c *MemberCache) Get(ctx context.Context, id string, atLeast uint64) (*Membership, error) {
	if atLeast == 0 || !c.waitApplied(ctx, atLeast) {
		return c.read(ctx, id)
	}
	c.mu.Lock()
	e, ok := c.entries.Get(id)
	if ok && e.ready {
		c.mu.Unlock()
		if e.m == nil {
			return nil, ErrNotFound
		}
		return e.m, nil
	}
	var placeholder *memberEntry
	if !ok {
		placeholder = &memberEntry{}
		c.entries.Add(id, placeholder)
	}
	c.mu.Unlock()
	m, err := c.read(ctx, id)
	if placeholder == nil {
		return m, err // another request's read will fill the entry
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.entries.Peek(id); ok && cur == placeholder {
		switch {
		case err == nil:
			*placeholder = memberEntry{m: m, ready: true}
		case errors.Is(err, ErrNotFound):
			*placeholder = memberEntry{ready: true}
		default:
			c.entries.Remove(id)
		}
	}
	return m, err
}

// AppliedRevision parses the revision a request's AppliedHeader carries:
// 0 when it carries none, or one that does not parse.
func AppliedRevision(header string) uint64 {
	rev, err := strconv.ParseUint(header, 10, 64)
	if err != nil {
		return 0
	}
	return rev
}
