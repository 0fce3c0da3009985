package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/pinion-health/pinion/pkg/store"
)

// testReindex: resources written with an older version's fields are found
// by the new fields after Reindex, every project's and only current,
// undeleted ones; values the new fields drop are gone; the version is
// recorded, so a second Reindex reads nothing.
func testReindex(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	// Version 1 stored s_name; version 2 adds s_tag, from the JSON.
	old := func(name string) map[string]any { return map[string]any{"s_name": []string{name}, "s_gone": "x"} }
	const n = 250 // more than one batch of 200
	var ws []*store.Write
	for i := range n {
		p := []string{"pa", "pb"}[i%2]
		id := "r" + string(rune('a'+i%26)) + strconv.Itoa(i)
		ws = append(ws, create(record("Thing", id, "1", p, t0, `{"tag":"t`+strconv.Itoa(i%3)+`","name":"n`+strconv.Itoa(i)+`"}`), old("n"+strconv.Itoa(i))))
	}
	ws = append(ws, create(record("Other", "o1", "1", "pa", t0, `{"tag":"t0"}`), map[string]any{"s_name": []string{"o"}}))
	// A resource whose fields cannot be computed keeps its rows, and does
	// not stop the others'.
	ws = append(ws, create(record("Thing", "bad", "1", "pa", t0, `{"tag":`), old("bad")))
	mustWrite(t, s, ws...)
	mustWrite(t, s, deletion("Thing", ws[0].ID, "2", "1", ws[0].Project, t0.Add(1)))

	fields := func(j []byte) (map[string]any, error) {
		var v struct{ Tag, Name string }
		if err := json.Unmarshal(j, &v); err != nil {
			return nil, err
		}
		return map[string]any{"s_name": []string{v.Name}, "s_tag": []string{v.Tag}}, nil
	}
	var heard []int
	read, err := s.Reindex(ctx, "Thing", 2, fields, func(done int) { heard = append(heard, done) })
	if err != nil {
		t.Fatalf("Reindex: %v", err)
	}
	if read != n {
		t.Errorf("Reindex read %d, want %d (the deleted one not read, the bad one read)", read, n)
	}
	if len(heard) < 2 || heard[len(heard)-1] != n || !slices.IsSorted(heard) {
		t.Errorf("progress heard %v, want rising counts ending at %d", heard, n)
	}
	if got := sortedIDs(t, s, "Thing", store.Query{Project: "pa", Filter: []store.Cond{store.Eq("s_name", "bad")}, Limit: 10}); !slices.Equal(got, []string{"bad"}) {
		t.Errorf("the resource whose fields failed lost its rows: %v", got)
	}

	tagged := func(project, tag string) []string {
		return sortedIDs(t, s, "Thing", store.Query{Project: project, Filter: []store.Cond{store.Eq("s_tag", tag)}, Limit: 1000})
	}
	var want []string
	for i := 1; i < n; i++ { // the first was deleted
		if i%2 == 1 && i%3 == 1 {
			want = append(want, ws[i].ID)
		}
	}
	slices.Sort(want)
	if got := tagged("pb", "t1"); !slices.Equal(got, want) {
		t.Errorf("s_tag=t1 in pb: %d found, want %d", len(got), len(want))
	}
	if got := sortedIDs(t, s, "Thing", store.Query{Project: "pa", Filter: []store.Cond{store.Exists("s_gone", true)}, Limit: 10}); !slices.Equal(got, []string{"bad"}) {
		t.Errorf("a field the new version drops is found on %v, want only on the resource not reindexed", got)
	}
	if got := sortedIDs(t, s, "Thing", store.Query{Project: "pa", Filter: []store.Cond{store.Eq("s_name", "n2")}, Limit: 10}); !slices.Equal(got, []string{ws[2].ID}) {
		t.Errorf("s_name=n2 finds %v, want [%s]", got, ws[2].ID)
	}
	if got := sortedIDs(t, s, "Other", store.Query{Project: "pa", Filter: []store.Cond{store.Exists("s_tag", true)}, Limit: 10}); len(got) != 0 {
		t.Errorf("another type was reindexed: %v", got)
	}

	again, err := s.Reindex(ctx, "Thing", 2, func([]byte) (map[string]any, error) {
		t.Error("Reindex at the recorded version computed fields")
		return nil, nil
	}, nil)
	if err != nil || again != 0 {
		t.Errorf("second Reindex = %d, %v; want 0, nil", again, err)
	}
	// A type never written records its version and reads nothing.
	if none, err := s.Reindex(ctx, "Empty", 2, fields, nil); err != nil || none != 0 {
		t.Errorf("Reindex of an empty type = %d, %v", none, err)
	}
}

// testConcurrentReindex: processes starting together (the replicas of a
// service after an upgrade) reindex one type at once, and all succeed.
func testConcurrentReindex(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	fields := func([]byte) (map[string]any, error) { return map[string]any{"s_tag": []string{"t1"}}, nil }
	for round := range 3 {
		typ := fmt.Sprintf("Type%d", round)
		mustWrite(t, s, create(record(typ, "one", "1", "pa", t0, `{}`), map[string]any{"s_name": []string{"one"}}))
		for i, err := range parallel(8, func(int) error {
			_, err := s.Reindex(ctx, typ, 2, fields, nil)
			return err
		}) {
			if err != nil {
				t.Fatalf("%s, reindex %d of 8 at once: %v", typ, i, err)
			}
		}
		if n, err := s.Reindex(ctx, typ, 2, fields, nil); err != nil || n != 0 {
			t.Errorf("%s: Reindex after the others = %d, %v; want the version recorded", typ, n, err)
		}
	}
}
