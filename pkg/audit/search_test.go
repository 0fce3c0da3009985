package audit

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// The trail's events are AuditEvents to every reader: a search by
// patient, entity, agent, subtype or date finds exactly those that match
// (the blocks' keys narrow which are read, never what is found), pages
// and counts across the trail and the AuditEvents stored as resources,
// and walks in id order as an export does.
func TestTrailSearch(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	w := NewWriter(tr.repo, tr.js, quiet)
	var evs []Event
	for i := range 30 {
		e := Event{ID: fmt.Sprintf("r%d", i), Kind: PatientRead.Name, Project: "p1", Time: at(i), Outcome: Success,
			Who: fmt.Sprintf("Practitioner/%d", i%3), Patients: []string{fmt.Sprintf("Patient/%d", i%5)},
			Entities: []Entity{{What: fmt.Sprintf("Patient/%d", i%5)}}}
		if i%10 == 9 {
			e = Event{ID: fmt.Sprintf("m%d", i), Kind: MemberChanged.Name, Project: "p1", Time: at(i), Outcome: Success,
				Who: "Patient/4", Entities: []Entity{{What: "ProjectMembership/m"}}}
		}
		evs = append(evs, e)
	}
	// Three writes: three blocks.
	for _, part := range [][]Event{evs[:7], evs[7:20], evs[20:]} {
		if err := w.Write(ctx, "p1", part); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(ctx, "p2", []Event{{ID: "other", Kind: PatientRead.Name, Project: "p2", Time: at(1), Who: "Practitioner/0",
		Patients: []string{"Patient/0"}, Entities: []Entity{{What: "Patient/0"}}}}); err != nil {
		t.Fatal(err)
	}
	stored, err := tr.repo.Create(ctx, repo.Scope{Project: "p1"}, map[string]any{"resourceType": "AuditEvent",
		"type": map[string]any{"code": "rest"}, "recorded": "2026-12-07T10:00:00Z", "agent": []any{map[string]any{"requestor": true}},
		"source": map[string]any{"observer": map[string]any{"display": "a bot"}}}, repo.WriteOptions{Project: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	find := func(params url.Values) ([]string, *repo.Page) {
		t.Helper()
		q, err := search.Parse("AuditEvent", params)
		if err != nil {
			t.Fatal(err)
		}
		page, err := tr.repo.Search(ctx, repo.Scope{Project: "p1"}, "AuditEvent", q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range page.Resources {
			ids = append(ids, r.ID)
		}
		return ids, page
	}
	// want is the places of p1's events meeting keep, newest first.
	want := func(keep func(i int, e Event) bool) []string {
		var out []string
		for i := len(evs) - 1; i >= 0; i-- {
			if keep(i, evs[i]) {
				out = append(out, ID("p1", int64(i+1)))
			}
		}
		return out
	}
	for _, c := range []struct {
		params url.Values
		keep   func(int, Event) bool
	}{
		{url.Values{"patient": {"Patient/4"}}, func(i int, e Event) bool { return e.Who == "Patient/4" || slices.Contains(e.Patients, "Patient/4") }},
		{url.Values{"entity": {"Patient/2"}}, func(i int, e Event) bool { return slices.Contains(e.Patients, "Patient/2") }},
		{url.Values{"entity": {"ProjectMembership/m"}}, func(i int, e Event) bool { return e.Kind == MemberChanged.Name }},
		{url.Values{"agent": {"Practitioner/1"}}, func(i int, e Event) bool { return e.Who == "Practitioner/1" }},
		{url.Values{"agent": {"1"}}, func(i int, e Event) bool { return e.Who == "Practitioner/1" }},
		{url.Values{"subtype": {"https://pinion.health/fhir/CodeSystem/audit-event|patient-read"}, "date": {"ge2026-12-07T10:00:25Z"}},
			func(i int, e Event) bool { return e.Kind == PatientRead.Name && i >= 25 }},
		{url.Values{"patient": {"Patient/3"}, "agent": {"Practitioner/0"}}, func(i int, e Event) bool {
			return e.Who == "Practitioner/0" && slices.Contains(e.Patients, "Patient/3")
		}},
	} {
		c.params.Set("_count", "100")
		got, _ := find(c.params)
		if w := want(c.keep); !slices.Equal(got, w) {
			t.Errorf("%v: %v, want %v", c.params, got, w)
		}
	}

	// Pages: the trail's 30 newest first, then the stored one.
	var all []string
	for offset := 0; ; offset += 7 {
		got, page := find(url.Values{"_count": {"7"}, "_offset": {fmt.Sprint(offset)}})
		all = append(all, got...)
		if !page.More {
			break
		}
	}
	if w := append(want(func(int, Event) bool { return true }), stored.ID); !slices.Equal(all, w) {
		t.Fatalf("paged: %v, want %v", all, w)
	}
	if _, page := find(url.Values{"_total": {"accurate"}, "_count": {"1"}}); page.Total != 31 {
		t.Fatalf("total %d, want 31", page.Total)
	}

	// In id order, from after an id: the places after it (and the stored
	// one, should its id sort after).
	q, _ := search.Parse("AuditEvent", url.Values{"_count": {"5"}})
	q.Sort = []store.Sort{{Field: store.FieldID}}
	page, err := tr.repo.Search(ctx, repo.Scope{Project: "p1"}, "AuditEvent", q, store.Compare(store.FieldID, store.OpGt, ID("p1", 27)))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Resources {
		ids = append(ids, r.ID)
	}
	after := []string{ID("p1", 28), ID("p1", 29), ID("p1", 30)}
	if stored.ID > ID("p1", 27) {
		after = append(after, stored.ID)
		slices.Sort(after)
	}
	if !slices.Equal(ids, after) {
		t.Fatalf("in id order after place 27: %v, want %v", ids, after)
	}

	// By id: one event, one version; another project's is not found.
	if res, err := tr.repo.Read(ctx, repo.Scope{Project: "p1"}, "AuditEvent", ID("p1", 3)); err != nil || res.VersionID != "1" || res.Project != "p1" {
		t.Fatalf("read: %+v %v", res, err)
	}
	if _, err := tr.repo.Read(ctx, repo.Scope{Project: "p1"}, "AuditEvent", ID("p2", 1)); err == nil {
		t.Fatal("p1 read p2's event")
	}
	if err := tr.repo.Delete(ctx, repo.AllProjects, "AuditEvent", ID("p1", 3)); err == nil {
		t.Fatal("a trail event was deleted through the repository")
	}
}
