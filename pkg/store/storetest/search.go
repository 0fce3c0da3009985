package storetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// doc is one resource of the search corpus as last written.
type doc struct {
	rec    store.Record
	fields map[string]any
	live   bool
}

// get is the field lookup store.Matches evaluates against: the search
// fields, and the record's own fields.
func (d *doc) get(f string) (any, bool) {
	switch f {
	case store.FieldID:
		return d.rec.ID, true
	case store.FieldProject:
		return d.rec.Project, true
	case store.FieldTime:
		return d.rec.Time, true
	}
	v, ok := d.fields[f]
	return v, ok
}

const corpusType = "Observation"

var (
	projects  = []string{"p1", "p2", "p3"}
	names     = []string{"alpha", "alphabet", "al", "beta", "betamax", "gamma", "Gamma", "delta", "épée", "naïve", "zeta", "ph", "a|b", "100", "7"}
	codes     = []string{"c1", "c2", "c3", "sys|c1", "sys|c2", "C1"}
	numbers   = []float64{-5, -0.5, 0, 1, 1.5, 2, 3.5, 7, 42, 100, 1e6}
	day       = 24 * time.Hour
	preEpoch  = time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	corpusLen = 60
)

// corpus writes the search corpus: corpusLen generated resources (some
// replaced, so only their last values count; some deleted), five written by
// hand for exact expectations, and distractors of another type with the
// same fields, which no search of corpusType may return.
func corpus(t *testing.T, s store.Store) []*doc {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(p float64) bool { return rng.Float64() < p }
	gen := func() map[string]any {
		f := map[string]any{}
		if pick(0.8) {
			var l []string
			for range 1 + rng.IntN(3) {
				if n := names[rng.IntN(len(names))]; !slices.Contains(l, n) {
					l = append(l, n)
				}
			}
			f["s_name"] = l
			// As written, for :exact (store.ExactSuffix): a store may keep
			// these apart from the value index.
			f["s_name_exact"] = l
		}
		if pick(0.9) {
			f["s_code"] = codes[rng.IntN(len(codes))]
		}
		if pick(0.7) {
			var l []float64
			for range 1 + rng.IntN(3) {
				l = append(l, numbers[rng.IntN(len(numbers))])
			}
			f["s_num"] = l
		}
		if pick(0.8) {
			f["s_val"] = numbers[rng.IntN(len(numbers))]
		}
		if pick(0.8) {
			lo := t0.Add(time.Duration(rng.IntN(41)-20) * day)
			if pick(0.05) {
				lo = preEpoch
			}
			f["s_date_lo"] = lo
			f["s_date_hi"] = lo.Add(time.Duration(rng.IntN(4)) * day)
		}
		if pick(0.25) {
			f["s_opt"] = []string{"x", "y"}[rng.IntN(2)]
		}
		if pick(0.85) {
			f["s_sort"] = fmt.Sprintf("k%02d", rng.IntN(20))
		}
		return f
	}
	var docs []*doc
	for i := range corpusLen {
		d := &doc{
			rec:    record(corpusType, fmt.Sprintf("o%02d", i), "1", projects[i%3], t0.Add(time.Duration(i/2)*time.Minute), fmt.Sprintf(`{"i":%d}`, i)),
			fields: gen(),
			live:   true,
		}
		mustWrite(t, s, create(d.rec, d.fields))
		switch {
		case i%10 == 7:
			d.rec = store.Record{Type: corpusType, ID: d.rec.ID, Version: "2", Time: d.rec.Time.Add(time.Hour), Project: d.rec.Project, Deleted: true}
			mustWrite(t, s, &store.Write{Record: d.rec, Prev: "1"})
			d.live = false
		case i%6 == 1:
			d.rec = record(corpusType, d.rec.ID, "2", d.rec.Project, t0.Add(time.Duration(i%5)*time.Minute+7*time.Millisecond), fmt.Sprintf(`{"i":%d,"v":2}`, i))
			d.fields = gen()
			mustWrite(t, s, replace(d.rec, "1", d.fields))
		}
		docs = append(docs, d)
	}
	hand := []struct {
		id, project string
		deleted     bool
		fields      map[string]any
	}{
		{"h1", "p1", false, map[string]any{"s_tag": []string{"red", "blue"}, "s_n": []float64{1, 10}, "s_when": t0}},
		{"h2", "p1", false, map[string]any{"s_tag": []string{"blue"}, "s_n": []float64{5}, "s_when": t0.Add(time.Millisecond)}},
		{"h3", "p1", false, map[string]any{"s_tag": []string{"green"}}},
		{"h4", "p1", true, map[string]any{"s_tag": []string{"blue"}, "s_n": []float64{5}}},
		{"h5", "p2", false, map[string]any{"s_tag": []string{"blue"}, "s_when": t0.Add(-day)}},
	}
	for i, h := range hand {
		d := &doc{rec: record(corpusType, h.id, "1", h.project, t0.Add(time.Duration(i)*time.Second), `{"hand":true}`), fields: h.fields, live: true}
		mustWrite(t, s, create(d.rec, d.fields))
		if h.deleted {
			d.rec = store.Record{Type: corpusType, ID: h.id, Version: "2", Time: d.rec.Time, Project: h.project, Deleted: true}
			mustWrite(t, s, &store.Write{Record: d.rec, Prev: "1"})
			d.live = false
		}
		docs = append(docs, d)
	}
	for i := range 6 {
		r := record("Patient", fmt.Sprintf("o%02d", i), "1", "p1", t0, `{}`)
		mustWrite(t, s, create(r, map[string]any{
			"s_name": []string{"alpha", "beta"}, "s_code": "c1", "s_num": []float64{2}, "s_val": 42.0,
			"s_date_lo": t0, "s_date_hi": t0, "s_opt": "x", "s_sort": "k00", "s_tag": []string{"blue", "green"},
		}))
	}
	return docs
}

// expect lists, sorted, the ids of the live docs in project ("" for all)
// that store.Matches says meet every condition.
func expect(docs []*doc, project string, conds ...store.Cond) []string {
	var out []string
	for _, d := range docs {
		if !d.live || project != "" && d.rec.Project != project {
			continue
		}
		ok := true
		for _, c := range conds {
			ok = ok && store.Matches(c, d.get)
		}
		if ok {
			out = append(out, d.rec.ID)
		}
	}
	slices.Sort(out)
	return out
}

// conditions covers every operator on list and scalar search fields, on
// the record's own fields, and nested.
func conditions() []store.Cond {
	cmpr := store.Compare
	return []store.Cond{
		store.Eq("s_code", "c1"),
		store.Eq("s_code", "c1", "c3", "nope"),
		store.Eq("s_name", "beta"),
		store.Eq("s_name", "Gamma", "épée"),
		store.Eq("s_num", 2.0, 3.5),
		store.Eq("s_val", 42.0),
		store.Eq("s_date_lo", t0.Add(-3*day)),
		{Op: store.OpNotIn, Field: "s_name", Values: []any{"alpha", "beta"}},
		{Op: store.OpNotIn, Field: "s_opt", Values: []any{"x"}},
		{Op: store.OpNotIn, Field: "s_num", Values: []any{0.0, 1.0, 2.0}},
		{Op: store.OpPrefix, Field: "s_name", Values: []any{"al"}},
		{Op: store.OpPrefix, Field: "s_name", Values: []any{"gam", "del"}},
		{Op: store.OpPrefix, Field: "s_code", Values: []any{"sys|"}},
		{Op: store.OpPrefix, Field: "s_name", Values: []any{"é"}},
		{Op: store.OpContains, Field: "s_name", Values: []any{"ph"}},
		{Op: store.OpContains, Field: "s_name", Values: []any{"ï", "max"}},
		{Op: store.OpContains, Field: "s_code", Values: []any{"|"}},
		cmpr("s_num", store.OpLt, 0.0),
		cmpr("s_num", store.OpLe, 2.0),
		cmpr("s_num", store.OpGt, 7.0),
		cmpr("s_val", store.OpGe, 42.0),
		cmpr("s_val", store.OpLt, 1.5),
		cmpr("s_date_lo", store.OpLt, t0),
		cmpr("s_date_lo", store.OpLe, t0.Add(-2*day)),
		cmpr("s_date_hi", store.OpGt, t0.Add(5*day)),
		cmpr("s_date_hi", store.OpGe, t0.Add(5*day)),
		cmpr("s_date_lo", store.OpLt, time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)),
		store.Exists("s_opt", true),
		store.Exists("s_opt", false),
		store.Exists("s_tag", true),
		store.And(store.Cond{Op: store.OpPrefix, Field: "s_name", Values: []any{"al"}}, cmpr("s_num", store.OpGt, 1.0)),
		store.Or(store.Eq("s_code", "c2"), store.Exists("s_opt", false)),
		store.And(store.Or(store.Eq("s_code", "c1"), store.Eq("s_code", "c2")), store.Or(cmpr("s_num", store.OpLt, 0.0), cmpr("s_val", store.OpGt, 50.0))),
		store.Or(store.And(cmpr("s_date_lo", store.OpGe, t0.Add(-5*day)), cmpr("s_date_hi", store.OpLe, t0.Add(5*day))), store.Eq("s_opt", "y")),
		store.Eq(store.FieldID, "o03", "o07", "h2", "zz"),
		{Op: store.OpPrefix, Field: store.FieldID, Values: []any{"o1", "h"}},
		{Op: store.OpNotIn, Field: store.FieldID, Values: []any{"o01", "o02", "h1"}},
		{Op: store.OpContains, Field: store.FieldID, Values: []any{"5"}},
		cmpr(store.FieldID, store.OpGt, "o2"),
		cmpr(store.FieldID, store.OpGe, "o20"),
		cmpr(store.FieldID, store.OpLt, "h3"),
		cmpr(store.FieldID, store.OpLe, "o05"),
		store.Eq(store.FieldProject, "p2"),
		{Op: store.OpNotIn, Field: store.FieldProject, Values: []any{"p1"}},
		cmpr(store.FieldTime, store.OpGe, t0.Add(20*time.Minute)),
		cmpr(store.FieldTime, store.OpLt, t0.Add(5*time.Minute)),
		cmpr(store.FieldTime, store.OpLe, t0.Add(3*time.Minute+7*time.Millisecond)),
		store.Eq(store.FieldTime, t0.Add(3*time.Minute)),
		store.Or(store.Eq(store.FieldID, "o04"), store.Eq("s_code", "C1")),
		// Exact values, beside the field they refine (as search.Parse
		// states them) and alone, in junctions, negated, tested for.
		store.And(store.Eq("s_name", "gamma"), store.Eq("s_name_exact", "Gamma")),
		store.Eq("s_name_exact", "gamma", "épée"),
		{Op: store.OpNotIn, Field: "s_name_exact", Values: []any{"alpha", "Gamma"}},
		store.Exists("s_name_exact", false),
		store.Or(store.Eq("s_name_exact", "beta"), store.Eq("s_code", "c2")),
		store.And(store.Or(store.Eq("s_code", "c1"), store.Eq("s_code", "c3")), store.Eq("s_name_exact", "alpha")),
		store.And(cmpr("s_num", store.OpGt, 1.0), store.Eq("s_name_exact", "delta", "zeta")),
		store.And(store.Eq(store.FieldProject, "p1", "p3"), store.Exists("s_num", false)),
	}
}

func describe(c store.Cond) string {
	switch c.Op {
	case store.OpAnd, store.OpOr:
		parts := make([]string, len(c.Sub))
		for i, s := range c.Sub {
			parts[i] = describe(s)
		}
		sep := " and "
		if c.Op == store.OpOr {
			sep = " or "
		}
		return "(" + strings.Join(parts, sep) + ")"
	}
	return fmt.Sprintf("%s op%d %v", c.Field, c.Op, c.Values)
}

// testSearch holds each condition's result to store.Matches over the
// corpus, in every project and in all.
func testSearch(t *testing.T, s store.Store) {
	docs := corpus(t, s)
	all := expect(docs, "")
	if len(all) < 50 {
		t.Fatalf("corpus has %d live resources", len(all))
	}
	discriminating := 0
	for _, c := range conditions() {
		for _, p := range []string{"", "p1", "p2", "p3"} {
			want := expect(docs, p, c)
			if p == "" && len(want) > 0 && len(want) < len(all) {
				discriminating++
			}
			q := store.Query{Project: p, Filter: []store.Cond{c}, Limit: 1000}
			if got := sortedIDs(t, s, corpusType, q); !slices.Equal(got, want) {
				t.Errorf("%s in project %q:\n got %v\nwant %v", describe(c), p, got, want)
			}
			n, err := s.Count(ctxOf(t), corpusType, &q)
			if err != nil || n != len(want) {
				t.Errorf("Count %s in project %q: %d, %v; want %d", describe(c), p, n, err, len(want))
			}
		}
	}
	// A suite whose conditions match all or nothing proves nothing.
	t.Logf("%d of %d conditions select a proper subset of the %d live resources", discriminating, len(conditions()), len(all))
	if discriminating < len(conditions())*3/4 {
		t.Fatalf("only %d conditions select a proper subset of the corpus", discriminating)
	}
	// Several conditions are ANDed, each met by whatever value.
	conds := []store.Cond{store.Cond{Op: store.OpPrefix, Field: "s_name", Values: []any{"a"}}, store.Compare("s_num", store.OpGe, 1.0), store.Exists("s_opt", false)}
	want := expect(docs, "p2", conds...)
	if got := sortedIDs(t, s, corpusType, store.Query{Project: "p2", Filter: conds, Limit: 1000}); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("three conditions in p2: got %v, want %v (non-empty)", got, want)
	}
	// Scoping alone.
	for _, p := range []string{"", "p1", "p2", "p3", "nope"} {
		want := expect(docs, p)
		if got := sortedIDs(t, s, corpusType, store.Query{Project: p, Limit: 1000}); !slices.Equal(got, want) {
			t.Errorf("project %q: got %v, want %v", p, got, want)
		}
	}
	if got := sortedIDs(t, s, "Nothing", store.Query{Limit: 1000}); len(got) != 0 {
		t.Errorf("a type never written: %v", got)
	}
}

// testSearchHand checks expectations computed by hand, so the suite does
// not rest on store.Matches alone.
func testSearchHand(t *testing.T, s store.Store) {
	docs := corpus(t, s)
	live := func(p string) int { return len(expect(docs, p)) }
	cmpr := store.Compare
	cases := []struct {
		project string
		cond    store.Cond
		want    []string
	}{
		{"", store.Eq("s_tag", "blue"), []string{"h1", "h2", "h5"}},
		{"p1", store.Eq("s_tag", "blue"), []string{"h1", "h2"}},
		{"p2", store.Eq("s_tag", "blue"), []string{"h5"}},
		{"p3", store.Eq("s_tag", "blue"), nil},
		{"", store.Eq("s_tag", "BLUE"), nil},
		{"", store.Eq("s_tag", "red", "green"), []string{"h1", "h3"}},
		{"", store.Cond{Op: store.OpPrefix, Field: "s_tag", Values: []any{"gr"}}, []string{"h3"}},
		{"", store.Cond{Op: store.OpContains, Field: "s_tag", Values: []any{"lu"}}, []string{"h1", "h2", "h5"}},
		{"", store.Exists("s_tag", true), []string{"h1", "h2", "h3", "h5"}},
		{"", store.And(store.Eq("s_tag", "blue"), store.Eq("s_tag", "red")), []string{"h1"}},
		{"", store.Eq(store.FieldID, "h1", "h3", "h4", "o99"), []string{"h1", "h3"}},
		{"", cmpr("s_n", store.OpGt, 4.0), []string{"h1", "h2"}},
		{"", cmpr("s_n", store.OpLt, 4.0), []string{"h1"}},
		{"", cmpr("s_n", store.OpLe, 5.0), []string{"h1", "h2"}},
		{"", cmpr("s_n", store.OpGe, 10.0), []string{"h1"}},
		{"", store.And(cmpr("s_n", store.OpGt, 4.0), cmpr("s_n", store.OpLt, 4.0)), []string{"h1"}},
		{"", store.Eq("s_n", 5.0), []string{"h2"}},
		{"", store.Eq("s_when", t0), []string{"h1"}},
		{"", cmpr("s_when", store.OpLe, t0), []string{"h1", "h5"}},
		{"", cmpr("s_when", store.OpLt, t0.Add(time.Millisecond)), []string{"h1", "h5"}},
		{"", cmpr("s_when", store.OpGe, t0.Add(time.Millisecond)), []string{"h2"}},
		{"", cmpr("s_when", store.OpGt, t0), []string{"h2"}},
		{"p1", store.And(store.Exists("s_tag", true), store.Cond{Op: store.OpNotIn, Field: "s_tag", Values: []any{"blue"}}), []string{"h3"}},
	}
	for _, c := range cases {
		got := sortedIDs(t, s, corpusType, store.Query{Project: c.project, Filter: []store.Cond{c.cond}, Limit: 1000})
		if !slices.Equal(got, c.want) {
			t.Errorf("%s in %q: got %v, want %v", describe(c.cond), c.project, got, c.want)
		}
		if want := expect(docs, c.project, c.cond); !slices.Equal(want, c.want) {
			t.Errorf("store.Matches disagrees with the hand expectation for %s: %v", describe(c.cond), want)
		}
	}
	// NotIn matches resources without the field: every live one in p2 but h5.
	q := store.Query{Project: "p2", Filter: []store.Cond{{Op: store.OpNotIn, Field: "s_tag", Values: []any{"blue"}}}}
	if n, err := s.Count(ctxOf(t), corpusType, &q); err != nil || n != live("p2")-1 || n < 10 {
		t.Errorf("NotIn blue in p2: %d, %v; want %d", n, err, live("p2")-1)
	}
	// Deleted resources are gone whatever the condition.
	q = store.Query{Filter: []store.Cond{store.Eq(store.FieldID, "o07", "o17", "h4")}, Limit: 10}
	if got := sortedIDs(t, s, corpusType, q); len(got) != 0 {
		t.Errorf("deleted resources found: %v", got)
	}
	// Distractors of another type keep to it.
	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_tag", "blue")}, Limit: 100}); len(got) != 6 {
		t.Errorf("Patient s_tag=blue: %v, want 6 resources", got)
	}
}

// testSearchKinds: text, numbers and instants never equal or compare with
// one another.
func testSearchKinds(t *testing.T, s store.Store) {
	fields := map[string]any{"s_text": []string{"100", "7", "2024-03-01"}, "s_num": []float64{100, 7}, "s_when": t0, "s_at": float64(t0.UnixMilli())}
	mustWrite(t, s, create(record(corpusType, "k", "1", "p1", t0, `{}`), fields))
	d := &doc{rec: record(corpusType, "k", "1", "p1", t0, `{}`), fields: fields, live: true}
	cmpr := store.Compare
	for _, c := range []store.Cond{
		store.Eq("s_text", 100.0),
		store.Eq("s_num", "100"),
		store.Eq("s_when", float64(t0.UnixMilli())),
		store.Eq("s_at", t0),
		cmpr("s_text", store.OpGt, 0.0),
		cmpr("s_text", store.OpLt, 1e300),
		cmpr("s_num", store.OpLt, t0),
		cmpr("s_when", store.OpGt, 0.0),
		cmpr("s_at", store.OpLe, t0),
		cmpr("s_at", store.OpGe, t0),
		{Op: store.OpPrefix, Field: "s_num", Values: []any{"1"}},
		{Op: store.OpContains, Field: "s_num", Values: []any{"0"}},
		{Op: store.OpPrefix, Field: "s_when", Values: []any{"2024"}},
		cmpr(store.FieldTime, store.OpGe, 0.0),
		store.Eq(store.FieldID, 1.0),
		cmpr(store.FieldID, store.OpGt, 0.0),
		{Op: store.OpPrefix, Field: store.FieldTime, Values: []any{"2"}},
	} {
		if store.Matches(c, d.get) {
			t.Fatalf("store.Matches matches %s", describe(c))
		}
		if got := sortedIDs(t, s, corpusType, store.Query{Filter: []store.Cond{c}, Limit: 10}); len(got) != 0 {
			t.Errorf("%s matched %v", describe(c), got)
		}
	}
	for _, c := range []store.Cond{
		store.Eq("s_text", "100"),
		store.Eq("s_num", 100.0),
		store.Eq("s_when", t0),
		store.Eq("s_at", float64(t0.UnixMilli())),
		cmpr("s_num", store.OpLt, 8.0),
		cmpr("s_when", store.OpGe, t0),
		{Op: store.OpNotIn, Field: "s_text", Values: []any{100.0}},
		{Op: store.OpNotIn, Field: "s_num", Values: []any{"100"}},
		{Op: store.OpNotIn, Field: store.FieldTime, Values: []any{"x", 1.0}},
	} {
		if !store.Matches(c, d.get) {
			t.Fatalf("store.Matches does not match %s", describe(c))
		}
		if got := sortedIDs(t, s, corpusType, store.Query{Filter: []store.Cond{c}, Limit: 10}); !slices.Equal(got, []string{"k"}) {
			t.Errorf("%s: got %v, want [k]", describe(c), got)
		}
	}
}

// sortKey is a doc's key for one sort: the smallest value ascending, the
// largest descending; ok is false when the field is missing.
func sortKey(d *doc, s store.Sort) (any, bool) {
	v, ok := d.get(s.Field)
	if !ok {
		return nil, false
	}
	var vals []any
	switch l := v.(type) {
	case []string:
		for _, x := range l {
			vals = append(vals, x)
		}
	case []float64:
		for _, x := range l {
			vals = append(vals, x)
		}
	default:
		vals = []any{v}
	}
	if len(vals) == 0 {
		return nil, false
	}
	best := vals[0]
	for _, x := range vals[1:] {
		if c := compareValues(x, best); s.Desc && c > 0 || !s.Desc && c < 0 {
			best = x
		}
	}
	return best, true
}

// compareValues orders two values of one kind; a missing one (nil) first.
func compareValues(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	switch x := a.(type) {
	case string:
		return strings.Compare(x, b.(string))
	case float64:
		return cmp.Compare(x, b.(float64))
	case time.Time:
		return x.Compare(b.(time.Time))
	}
	panic(fmt.Sprintf("storetest: cannot order %T", a))
}

// compareDocs orders two docs as sorts asks; 0 when they tie. A doc
// without the first sort's field comes after those with it, in either
// direction; a later sort counts a missing field as the smallest value.
func compareDocs(a, b *doc, sorts []store.Sort) int {
	for i, s := range sorts {
		ka, oka := sortKey(a, s)
		kb, okb := sortKey(b, s)
		var c int
		switch {
		case i > 0 || oka && okb:
			c = compareValues(ka, kb)
		case oka != okb && !oka:
			return 1
		case oka != okb:
			return -1
		}
		if s.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// testSort checks each order against the corpus, and that pages
// concatenate to the whole list.
func testSort(t *testing.T, s store.Store) {
	docs := corpus(t, s)
	byID := map[string]*doc{}
	missing := 0
	for _, d := range docs {
		if d.live {
			byID[d.rec.ID] = d
			if _, ok := d.fields["s_sort"]; !ok {
				missing++
			}
		}
	}
	if missing == 0 {
		t.Fatal("the corpus has no resource without s_sort; the missing-last order goes untested")
	}
	asc := func(f string) store.Sort { return store.Sort{Field: f} }
	desc := func(f string) store.Sort { return store.Sort{Field: f, Desc: true} }
	sorts := [][]store.Sort{
		nil,
		{asc("s_sort")},
		{desc("s_sort")},
		{asc(store.FieldTime)},
		{desc(store.FieldTime)},
		{asc(store.FieldID)},
		{desc(store.FieldID)},
		{asc("s_name")},
		{desc("s_name")},
		{asc("s_val")},
		{desc("s_date_lo")},
		{asc("s_code"), desc(store.FieldID)},
		{desc(store.FieldTime), asc(store.FieldID)},
		{asc("s_sort"), asc("s_val"), asc(store.FieldID)},
	}
	filters := []struct {
		project string
		filter  []store.Cond
	}{
		{"", nil},
		{"p1", nil},
		{"", []store.Cond{store.Exists("s_code", true)}},
		{"p2", []store.Cond{{Op: store.OpNotIn, Field: "s_opt", Values: []any{"x"}}}},
		// A condition an index range answers: a store may gather and
		// sort its few matches rather than walk the sort's index.
		{"p1", []store.Cond{{Op: store.OpPrefix, Field: "s_name", Values: []any{""}}}},
	}
	for _, so := range sorts {
		for _, f := range filters {
			what := fmt.Sprintf("sort %+v, project %q, filter %d", so, f.project, len(f.filter))
			q := store.Query{Project: f.project, Filter: f.filter, Sort: so, Limit: 1000}
			full := search(t, s, corpusType, q)
			got := ids(full)
			want := expect(docs, f.project, f.filter...)
			if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, want) {
				t.Fatalf("%s: got %v, want %v", what, sorted, want)
			}
			for i := 1; i < len(got); i++ {
				if compareDocs(byID[got[i-1]], byID[got[i]], so) > 0 {
					t.Fatalf("%s: %s before %s:\n%v", what, got[i-1], got[i], got)
				}
			}
			n, err := s.Count(ctxOf(t), corpusType, &q)
			if err != nil || n != len(got) {
				t.Fatalf("%s: Count %d, %v; Search found %d", what, n, err, len(got))
			}
			for _, size := range []int{1, 7} {
				var paged []string
				for off := 0; ; off += size {
					q.Offset, q.Limit = off, size
					page := ids(search(t, s, corpusType, q))
					if len(page) > size {
						t.Fatalf("%s: page of %d, limit %d", what, len(page), size)
					}
					paged = append(paged, page...)
					if len(page) < size || off > 1000 {
						break
					}
				}
				if !slices.Equal(paged, got) {
					t.Fatalf("%s: pages of %d:\n%v\nwhole:\n%v", what, size, paged, got)
				}
			}
			q.Offset, q.Limit = len(got), 10
			if rest := search(t, s, corpusType, q); len(rest) != 0 {
				t.Fatalf("%s: a page past the end has %d", what, len(rest))
			}
		}
	}
	// Unsorted: any order, but one order from page to page, each match
	// once, also where one resource has several matching values (s_name
	// lists) and a store walks the values.
	for _, f := range []struct {
		project string
		filter  []store.Cond
	}{
		{"", []store.Cond{{Op: store.OpPrefix, Field: "s_name", Values: []any{"a"}}}},
		{"p1", []store.Cond{{Op: store.OpPrefix, Field: "s_name", Values: []any{""}}}},
		{"p1", []store.Cond{{Op: store.OpPrefix, Field: "s_name", Values: []any{"al"}}, store.Exists("s_code", true)}},
		{"", []store.Cond{store.Eq("s_name", "beta")}},
		{"p2", []store.Cond{store.Eq("s_code", "c1")}},
	} {
		what := fmt.Sprintf("unsorted, project %q, filter %v", f.project, f.filter)
		want := expect(docs, f.project, f.filter...)
		if len(want) < 2 {
			t.Fatalf("%s: the corpus gives %d matches; the test needs several", what, len(want))
		}
		for _, size := range []int{1, 3, 1000} {
			var paged []string
			for off := 0; off <= len(want); off += size {
				page := ids(search(t, s, corpusType, store.Query{Project: f.project, Filter: f.filter, Offset: off, Limit: size}))
				paged = append(paged, page...)
			}
			if sorted := slices.Sorted(slices.Values(paged)); !slices.Equal(sorted, want) {
				t.Fatalf("%s: pages of %d give %v, want %v", what, size, sorted, want)
			}
		}
	}

	// Orders fixed by hand: by id, the whole order is known.
	want := expect(docs, "p1")
	if got := ids(search(t, s, corpusType, store.Query{Project: "p1", Sort: []store.Sort{asc(store.FieldID)}, Limit: 1000})); !slices.Equal(got, want) {
		t.Fatalf("p1 by id: %v, want %v", got, want)
	}
	slices.Reverse(want)
	if got := ids(search(t, s, corpusType, store.Query{Project: "p1", Sort: []store.Sort{desc(store.FieldID)}, Limit: 1000})); !slices.Equal(got, want) {
		t.Fatalf("p1 by id descending: %v, want %v", got, want)
	}
	hq := store.Query{Filter: []store.Cond{store.Exists("s_n", true)}, Limit: 10}
	for _, c := range []struct {
		sort store.Sort
		want []string
	}{
		{asc("s_n"), []string{"h1", "h2"}},  // 1 < 5
		{desc("s_n"), []string{"h1", "h2"}}, // 10 > 5
		{desc("s_tag"), []string{"h1", "h2"}},
		{asc(store.FieldTime), []string{"h1", "h2"}},
		{desc(store.FieldTime), []string{"h2", "h1"}},
	} {
		hq.Sort = []store.Sort{c.sort}
		if got := ids(search(t, s, corpusType, hq)); !slices.Equal(got, c.want) {
			t.Fatalf("hand sort %+v: %v, want %v", c.sort, got, c.want)
		}
	}
	tq := store.Query{Filter: []store.Cond{store.Eq(store.FieldID, "h1", "h2", "h3", "h5")}, Limit: 10}
	tq.Sort = []store.Sort{asc("s_when")}
	if got := ids(search(t, s, corpusType, tq)); !slices.Equal(got, []string{"h5", "h1", "h2", "h3"}) {
		t.Fatalf("by s_when, missing last: %v", got)
	}
	tq.Sort = []store.Sort{desc("s_when")}
	if got := ids(search(t, s, corpusType, tq)); !slices.Equal(got, []string{"h2", "h1", "h5", "h3"}) {
		t.Fatalf("by s_when descending, missing last: %v", got)
	}
}
