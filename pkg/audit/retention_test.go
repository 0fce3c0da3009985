package audit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// at is the time of signIns' i-th event.
func at(i int) time.Time { return time.Date(2026, 12, 7, 10, 0, i, 0, time.UTC) }

// retentionEvents are the retention events stored in project's chain,
// from its first kept place.
func (tr *trail) retentionEvents(project string) []string {
	tr.t.Helper()
	ctx := context.Background()
	first, err := First(ctx, tr.repo, project)
	if err != nil {
		tr.t.Fatal(err)
	}
	var found []string
	for seq := first; ; seq++ {
		raw, _, err := Stored(ctx, tr.repo.NewTrailReader(), project, seq)
		if fhir.Missing(err) {
			return found
		}
		if err != nil {
			tr.t.Fatal(err)
		}
		if strings.Contains(string(raw), `"code":"retention"`) {
			found = append(found, string(raw))
		}
	}
}

// gone says whether the store holds nothing of project's seq-th event:
// no block holds its place (purged, not cut out underneath).
func (tr *trail) gone(project string, seq int64) bool {
	tr.t.Helper()
	ctx := context.Background()
	b, err := tr.st.TrailBlock(ctx, project, seq)
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	if err != nil {
		tr.t.Fatal(err)
	}
	return b.Last() < seq
}

// Retention removes the prefix of a chain recorded before its cut-off,
// from the store entirely, and records that it did in the same chain:
// the chain verifies whole from the place after, the writers and a
// writer started afresh go on after it, and a second pass removes
// nothing more; in SQLite and in MongoDB.
func TestRetention(t *testing.T) { retention(t, newTrail) }

func TestRetentionInMongoDB(t *testing.T) { retention(t, newMongoTrail) }

func retention(t *testing.T, newTrail func(testing.TB) *trail) {
	tr := newTrail(t)
	ctx := context.Background()
	w, stop := tr.runWriter()
	if err := w.Write(ctx, "p1", signIns("p1", 20)); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(tr.js)

	rm, err := Retain(ctx, tr.repo, rec, "p1", at(12), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if rm == nil || rm.From != 1 || rm.To != 12 || !rm.Cutoff.Equal(at(12)) {
		t.Fatalf("removed %+v, want 1 to 12", rm)
	}
	for seq := int64(1); seq <= 12; seq++ {
		if !tr.gone("p1", seq) {
			t.Fatalf("event %d is still stored", seq)
		}
	}
	testenv.Eventually(t, "the retention event stored", func() bool { return tr.verify("p1").Events == 9 })
	rep := tr.verify("p1")
	if !rep.Whole || rep.From != 13 || rep.Head.Seq != 21 {
		t.Fatalf("after retention: %+v", rep)
	}
	if first, _ := First(ctx, tr.repo, "p1"); first != 13 {
		t.Fatalf("First is %d, want 13", first)
	}
	evs := tr.retentionEvents("p1")
	if len(evs) != 1 || !strings.Contains(evs[0], "removed seq 1 to 12: the events recorded before 2026-12-07T10:00:12Z") ||
		!strings.Contains(evs[0], `"action":"D"`) {
		t.Fatalf("retention events: %v", evs)
	}

	if rm, err := Retain(ctx, tr.repo, rec, "p1", at(12), quiet); rm != nil || err != nil {
		t.Fatalf("a second pass removed %+v, %v", rm, err)
	}
	// A writer that starts afresh goes on after the chain's end.
	stop()
	again := NewWriter(tr.repo, tr.js, quiet)
	if err := again.Write(ctx, "p1", signIns("p1", 23)[20:]); err != nil {
		t.Fatal(err)
	}
	if rep := tr.verify("p1"); !rep.Whole || rep.Events != 12 || rep.From != 13 {
		t.Fatalf("after more events: %+v", rep)
	}
}

// Every event past the cut-off is removed, the chain's last included:
// the retained link carries its digest, after which the retention event
// and the next ones follow.
func TestRetentionOfAWholeChain(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	w, _ := tr.runWriter()
	if err := w.Write(ctx, "", signIns("", 5)); err != nil {
		t.Fatal(err)
	}
	rm, err := Retain(ctx, tr.repo, NewRecorder(tr.js), "", at(60), quiet)
	if err != nil || rm == nil || rm.From != 1 || rm.To != 5 {
		t.Fatalf("removed %+v, %v", rm, err)
	}
	testenv.Eventually(t, "the retention event stored", func() bool { return tr.verify("").Events == 1 })
	if rep := tr.verify(""); !rep.Whole || rep.From != 6 || rep.Head.Seq != 6 {
		t.Fatalf("%+v", rep)
	}
}

// Retention never removes a break: it stops before the first event that
// does not verify, which Verify goes on reporting.
func TestRetentionKeepsABreak(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	if err := NewWriter(tr.repo, tr.js, quiet).Write(ctx, "p1", signIns("p1", 12)); err != nil {
		t.Fatal(err)
	}
	tr.editJSON(ID("p1", 5), `"outcome":"0"`, `"outcome":"4"`)
	rm, err := Retain(ctx, tr.repo, nil, "p1", at(60), quiet)
	if err != nil || rm == nil || rm.To != 4 {
		t.Fatalf("removed %+v, %v; want 1 to 4", rm, err)
	}
	rep := tr.verify("p1")
	if rep.Whole || rep.From != 5 || rep.Break.Seq != 5 || rep.Break.Problem != Edited {
		t.Fatalf("%+v %+v", rep, rep.Break)
	}
	if rm, err := Retain(ctx, tr.repo, nil, "p1", at(60), quiet); rm != nil || err != nil {
		t.Fatalf("a second pass removed %+v, %v", rm, err)
	}
}

// A process that stops between retention's steps (a crash) leaves a chain
// that verifies whole; the next pass finishes the removal, and records it
// once; in SQLite and in MongoDB.
func TestRetentionCrash(t *testing.T) { retentionCrash(t, newTrail) }

func TestRetentionCrashInMongoDB(t *testing.T) { retentionCrash(t, newMongoTrail) }

func retentionCrash(t *testing.T, newTrail func(testing.TB) *trail) {
	for _, tc := range []struct {
		name string
		// crash does the steps before the crash.
		crash func(tr *trail, raw []byte, st retainedState)
	}{
		{"after the retained key moved", func(*trail, []byte, retainedState) {}},
		{"after part of the purge", func(tr *trail, _ []byte, _ retainedState) {
			if _, err := tr.repo.PurgeTrail(context.Background(), "p1", 3); err != nil {
				tr.t.Fatal(err)
			}
		}},
		{"after the event was recorded", func(tr *trail, _ []byte, st retainedState) {
			if _, err := tr.repo.PurgeTrail(context.Background(), "p1", st.Seq); err != nil {
				tr.t.Fatal(err)
			}
			rm := Removal{Project: "p1", From: st.From, To: st.Seq, Cutoff: st.Cutoff}
			if err := NewRecorder(tr.js).Record(context.Background(), rm.event()); err != nil {
				tr.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrail(t)
			ctx := context.Background()
			w, _ := tr.runWriter()
			if err := w.Write(ctx, "p1", signIns("p1", 10)); err != nil {
				t.Fatal(err)
			}
			raw, st, err := beginRemoval(ctx, tr.repo, "p1", at(6), quiet)
			if err != nil || raw == nil || st.From != 1 || st.Seq != 6 {
				t.Fatalf("began %+v, %v", st, err)
			}
			tc.crash(tr, raw, st)
			if rep := tr.verify("p1"); !rep.Whole || rep.From != 7 {
				t.Fatalf("after the crash: %+v %+v", rep, rep.Break)
			}

			rm, err := Retain(ctx, tr.repo, NewRecorder(tr.js), "p1", at(6), quiet)
			if err != nil || rm == nil || rm.From != 1 || rm.To != 6 {
				t.Fatalf("the next pass removed %+v, %v", rm, err)
			}
			for seq := int64(1); seq <= 6; seq++ {
				if !tr.gone("p1", seq) {
					t.Fatalf("event %d is still stored", seq)
				}
			}
			testenv.Eventually(t, "the retention event stored", func() bool { return tr.verify("p1").Events == 5 })
			if evs := tr.retentionEvents("p1"); len(evs) != 1 {
				t.Fatalf("%d retention events", len(evs))
			}
			if rep := tr.verify("p1"); !rep.Whole || rep.From != 7 {
				t.Fatalf("%+v", rep)
			}
			if _, st, _ := readRetained(ctx, tr.repo, "p1"); !st.Done || st.Seq != 6 {
				t.Fatalf("retained %+v", st)
			}
		})
	}
}

// A pass covers every project and the server's trail, from one instance
// at a time: another, finding the lease held, does nothing until it ends.
func TestRetentionPass(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	w, _ := tr.runWriter()
	project := uuid.NewString()
	if _, err := tr.repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "kept a while"}, repo.WriteOptions{ID: project}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{project, ""} {
		if err := w.Write(ctx, p, signIns(p, 6)); err != nil {
			t.Fatal(err)
		}
	}
	now := at(0).Add(time.Hour)
	clock := func() time.Time { return now }
	a := &Retention{Repo: tr.repo, Recorder: NewRecorder(tr.js), Keep: time.Hour - 3*time.Second, Log: quiet, now: clock}
	b := &Retention{Repo: tr.repo, Recorder: NewRecorder(tr.js), Keep: time.Minute, Log: quiet, now: clock}
	removed, err := a.Pass(ctx)
	if err != nil || len(removed) != 2 {
		t.Fatalf("removed %+v, %v", removed, err)
	}
	for _, rm := range removed {
		if rm.From != 1 || rm.To != 3 {
			t.Fatalf("removed %+v, want 1 to 3", rm)
		}
	}
	if removed, err := b.Pass(ctx); removed != nil || err != nil {
		t.Fatalf("a second instance removed %+v, %v while the lease was held", removed, err)
	}
	now = now.Add(time.Hour + time.Second) // the lease runs out
	if removed, err := b.Pass(ctx); len(removed) != 2 || err != nil {
		t.Fatalf("the second instance, once the lease ran out: %+v, %v", removed, err)
	}
	testenv.Eventually(t, "the retention events stored", func() bool {
		return tr.verify(project).Head.Seq == 8 && tr.verify("").Head.Seq == 8
	})
	for _, p := range []string{project, ""} {
		if rep := tr.verify(p); !rep.Whole || rep.From != 7 {
			t.Fatalf("%q: %+v", p, rep)
		}
	}
}
