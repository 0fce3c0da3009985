package fhirsvc

import (
	"context"
	"testing"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// TestStrictFollowsTheProject: every write asks whether its project
// validates strictly. The answer follows each version of the Project, and
// asking again costs no decoding (issue 38: a create decoded the whole
// Project each time).
func TestStrictFollowsTheProject(t *testing.T) {
	ctx := context.Background()
	env := testenv.New(t)
	s := &Service{repo: env.Repo}
	p, err := env.Repo.Create(ctx, repo.AllProjects, map[string]any{
		"resourceType": "Project", "name": "Lenient", "strictMode": false,
	}, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.strict(ctx, p.ID) {
		t.Fatal("a project with strictMode false validates strictly")
	}
	// One allocation is the repository's cache key; decoding made a dozen.
	if allocs := testing.AllocsPerRun(100, func() { s.strict(ctx, p.ID) }); allocs > 1 {
		t.Errorf("asking a cached project's mode again allocates %.0f times, want 1", allocs)
	}
	if _, err := env.Repo.Update(ctx, repo.AllProjects, map[string]any{
		"resourceType": "Project", "id": p.ID, "name": "Lenient", "strictMode": true,
	}, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !s.strict(ctx, p.ID) {
		t.Fatal("the project's new version with strictMode true is not strict")
	}
	for name, project := range map[string]string{"none": "", "missing": "no-such-project"} {
		if !s.strict(ctx, project) {
			t.Errorf("%s project: not strict", name)
		}
	}
}
