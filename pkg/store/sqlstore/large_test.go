package sqlstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// TestLargeCorpus loads 100,000 patients (about 25 s on two cores) and logs
// what typical searches take and how SQLite runs them. Too slow for every
// run: set PINION_SQLSTORE_LARGE=1.
func TestLargeCorpus(t *testing.T) {
	if os.Getenv("PINION_SQLSTORE_LARGE") == "" {
		t.Skip("set PINION_SQLSTORE_LARGE=1 to load 100,000 resources")
	}
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "large.db"), Options{Sync: "off", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	var ws []*store.Write
	for i := range 100000 {
		ws = append(ws, &store.Write{
			Record: store.Record{Type: "Patient", ID: fmt.Sprint(i), Version: "1", Time: time.Now().UTC(), Project: fmt.Sprint("p", i%4),
				JSON: []byte(`{"resourceType":"Patient","name":[{"family":"Smith"}]}`)},
			Fields: benchFields(i),
		})
		if len(ws) == 1000 {
			if err := s.Write(ctx, ws...); err != nil {
				t.Fatal(err)
			}
			ws = ws[:0]
		}
	}
	t.Logf("loaded in %v", time.Since(start))
	prefix := func(p string) store.Cond { return store.Cond{Op: store.OpPrefix, Field: "s_name", Values: []any{p}} }
	for _, c := range []struct {
		name string
		q    store.Query
	}{
		{"list project", store.Query{Project: "p1", Limit: 20}},
		{"list project, page 200", store.Query{Project: "p1", Limit: 20, Offset: 4000}},
		{"list every project", store.Query{Limit: 20}},
		{"list by time", store.Query{Project: "p1", Sort: []store.Sort{{Field: store.FieldTime, Desc: true}}, Limit: 20}},
		{"prefix", store.Query{Project: "p1", Filter: []store.Cond{prefix("smith123")}, Limit: 20}},
		{"prefix of a quarter", store.Query{Project: "p1", Filter: []store.Cond{prefix("smi")}, Limit: 20}},
		{"equality", store.Query{Project: "p1", Filter: []store.Cond{store.Eq("s_identifier", "sys|12345")}, Limit: 20}},
		{"equality, sorted", store.Query{Project: "p1", Filter: []store.Cond{store.Eq("s_gender", "male")}, Sort: []store.Sort{{Field: "s_name_sort"}}, Limit: 20}},
		{"not in", store.Query{Project: "p1", Filter: []store.Cond{{Op: store.OpNotIn, Field: "s_gender", Values: []any{"male"}}}, Limit: 20}},
		{"missing", store.Query{Project: "p1", Filter: []store.Cond{store.Exists("s_deceased", false)}, Limit: 20}},
		{"contains", store.Query{Project: "p1", Filter: []store.Cond{{Op: store.OpContains, Field: "s_name", Values: []any{"h1234"}}}, Limit: 20}},
		{"date range", store.Query{Project: "p1", Filter: []store.Cond{store.Compare("s_birthdate_lo", store.OpGe, time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC))}, Limit: 20}},
		{"ids", store.Query{Project: "p1", Filter: []store.Cond{store.Eq(store.FieldID, "5", "9")}, Limit: 20}},
	} {
		st := time.Now()
		rs, err := s.Search(ctx, "Patient", &c.q)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(st)
		st = time.Now()
		n, err := s.Count(ctx, "Patient", &c.q)
		if err != nil {
			t.Fatal(err)
		}
		text, args, _ := searchSQL("Patient", &c.q, false)
		plan := explain(t, s, text, args...)
		t.Logf("%-24s search %8v (%2d found)  count %8v (%d)\n%s", c.name, took.Round(time.Microsecond), len(rs), time.Since(st).Round(time.Microsecond), n, plan)
		if bad := scans(plan); bad != "" {
			t.Errorf("%s scans: %s", c.name, bad)
		}
	}
}
