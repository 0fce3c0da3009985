package repo

import (
	"context"
	"errors"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// maxModifyAttempts bounds Modify's retries: past it, the 412 is answered.
// Four is what the project's secrets and sites, and the policy-checked
// updates, have always made.
const maxModifyAttempts = 4

// Modify updates a resource by closure. It reads the current version,
// calls change with it, and writes what change returns conditional on
// the version read, so a write that came between is never lost: Modify
// reads and calls change again, up to maxModifyAttempts times, and then
// answers the 412. change may run more than once, and sees the version
// each attempt read.
//
// change returns the resource to store (its resourceType and id those of
// cur), nil to leave it as it is (Modify then returns cur), or an error,
// which Modify returns with nothing written. With o.IfMatch set, the
// caller named the version: a different one is a 412 and no retry is made.
func (r *Repo) Modify(ctx context.Context, sc Scope, typ, id string, o WriteOptions, change func(cur *Resource) (map[string]any, error)) (*Resource, error) {
	for attempt := 1; ; attempt++ {
		cur, err := r.pinnedRead(ctx, sc, typ, id, o.IfMatch)
		if err != nil {
			return nil, err
		}
		res, err := change(cur)
		if err != nil {
			return nil, err
		}
		if res == nil {
			return cur, nil
		}
		if t, _ := res["resourceType"].(string); t != typ {
			return nil, fhir.BadRequest("Incorrect resource type", "resourceType")
		}
		if i, _ := res["id"].(string); i != id {
			return nil, fhir.BadRequest("Incorrect ID", "id")
		}
		pinned := o
		pinned.IfMatch = cur.VersionID
		out, err := r.Update(ctx, sc, res, pinned)
		if o.IfMatch == "" && attempt < maxModifyAttempts && errors.Is(err, fhir.ErrPreconditionFailed) {
			continue // another write came between: change that one
		}
		return out, err
	}
}

// pinnedRead reads the current version; with ifMatch set it must be that
// one. As in update, a cached version behind another instance's write is
// dropped and the store asked before a caller naming that write is refused.
func (r *Repo) pinnedRead(ctx context.Context, sc Scope, typ, id, ifMatch string) (*Resource, error) {
	cur, err := r.Read(ctx, sc, typ, id)
	if err != nil || ifMatch == "" || ifMatch == cur.VersionID {
		return cur, err
	}
	r.forget(typ, id)
	if cur, err = r.Read(ctx, sc, typ, id); err != nil {
		return nil, err
	}
	if ifMatch != cur.VersionID {
		return nil, fhir.PreconditionFailed()
	}
	return cur, nil
}
