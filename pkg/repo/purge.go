package repo

import (
	"context"
	"fmt"

	"github.com/pinion-health/pinion/pkg/store"
)

// Purge removes resources entirely (store.Store.Purge: every version, no
// history left, the ids free again), in calls of store.MaxPurge, and
// drops them from this instance's cache. No event is published: only the
// audit trail's retention purges, and nothing reads a removed event
// again through another instance's cache but a read by its id, until
// that cache lets it go.
func (r *Repo) Purge(ctx context.Context, typ string, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), store.MaxPurge)
		for _, id := range ids[:n] {
			r.forget(typ, id)
		}
		if err := r.st.Purge(ctx, typ, ids[:n]); err != nil {
			return fmt.Errorf("purge %d %s: %w", n, typ, err)
		}
		// Again: a read racing the purge may have cached one meanwhile.
		for _, id := range ids[:n] {
			r.forget(typ, id)
		}
		ids = ids[n:]
	}
	return nil
}
