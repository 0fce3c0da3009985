package audit

import (
	"context"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// projectPage is how many Projects one read of Projects takes.
const projectPage = 500

// Projects calls fn with each project that may have a trail: the
// server's own ("") first, then every Project, in id order, a page at a
// time (bounded memory however many there are). A deleted Project is not
// among them: its trail stays, and is verified by naming it.
func Projects(ctx context.Context, r *repo.Repo, fn func(project string) error) error {
	if err := fn(""); err != nil {
		return err
	}
	last := ""
	for {
		var after []store.Cond
		if last != "" {
			after = append(after, store.Compare(store.FieldID, store.OpGt, last))
		}
		page, err := r.Search(ctx, repo.AllProjects, "Project",
			&search.Query{Count: projectPage, Sort: []store.Sort{{Field: store.FieldID}}, Total: "none"}, after...)
		if err != nil {
			return err
		}
		for _, p := range page.Resources {
			if err := fn(p.ID); err != nil {
				return err
			}
			last = p.ID
		}
		if !page.More || len(page.Resources) == 0 {
			return nil
		}
	}
}
