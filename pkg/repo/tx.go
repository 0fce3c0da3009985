package repo

import (
	"context"
	"sync"

	"github.com/pinion-health/pinion/pkg/store"
)

// Tx gathers the writes of a FHIR transaction Bundle so that they are
// stored by one store write: on SQLite one database transaction, all or
// nothing, with one commit rather than one per entry. Until Commit, the
// repository answers each write as if stored, and reads by id within the
// transaction see its own writes; searches do not.
type Tx struct {
	r       *Repo
	mu      sync.Mutex
	vs      []*version
	pending map[cacheKey]*Resource // type/id → the newest version written here
}

type txKey struct{}

// Begin starts a transaction; writes through the returned context join it.
func (r *Repo) Begin(ctx context.Context) (context.Context, *Tx) {
	tx := &Tx{r: r, pending: map[cacheKey]*Resource{}}
	return context.WithValue(ctx, txKey{}, tx), tx
}

// txOf is the transaction of this repository that ctx carries, if any.
func (r *Repo) txOf(ctx context.Context) *Tx {
	tx, _ := ctx.Value(txKey{}).(*Tx)
	if tx == nil || tx.r != r {
		return nil
	}
	return tx
}

func (tx *Tx) add(v *version) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	tx.vs = append(tx.vs, v)
	tx.pending[cacheKey{v.out.Type, v.out.ID}] = v.out
}

func (tx *Tx) read(typ, id string) (*Resource, bool) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	res, ok := tx.pending[cacheKey{typ, id}]
	return res, ok
}

// Commit stores every write of the transaction. On error nothing is
// stored by a store with transactions; see the store for the others.
func (tx *Tx) Commit(ctx context.Context) error {
	tx.mu.Lock()
	vs := tx.vs
	tx.vs, tx.pending = nil, map[cacheKey]*Resource{}
	tx.mu.Unlock()
	if len(vs) == 0 {
		return nil
	}
	ws := make([]*store.Write, len(vs))
	for i, v := range vs {
		ws[i] = v.w
	}
	if err := tx.r.st.Write(ctx, ws...); err != nil {
		for _, v := range vs {
			tx.r.forget(v.out.Type, v.out.ID)
		}
		return storeError(err, "", "")
	}
	for _, v := range vs {
		tx.r.stored(v)
	}
	return nil
}
