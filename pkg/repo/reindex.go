package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
)

// Reindex brings the search fields of every stored resource up to what
// this build computes (search.FieldsVersion): a store written by an older
// build lacks fields a newer one searches by, and a search would miss its
// resources. Nothing is read for a type already up to date; a store that
// holds many resources of a changed type takes a while, said in the log.
// The FHIR service runs it before it answers.
func (r *Repo) Reindex(ctx context.Context) error {
	for _, typ := range search.TypesWithParams() {
		v := search.FieldsVersion(typ)
		if v <= 1 {
			continue
		}
		start, said := time.Now(), time.Now()
		progress := func(done int) {
			if time.Since(said) > 5*time.Second {
				r.log.Info("repo: reindexing search fields", "type", typ, "version", v, "done", done)
				said = time.Now()
			}
		}
		n, err := r.st.Reindex(ctx, typ, v, func(body []byte) (map[string]any, error) {
			res, err := fhir.Decode(body)
			if err != nil {
				return nil, err
			}
			return search.Fields(typ, res), nil
		}, progress)
		if err != nil {
			return fmt.Errorf("reindexing %s: %w", typ, err)
		}
		if n > 0 {
			r.log.Info("repo: search fields reindexed", "type", typ, "version", v, "resources", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}
