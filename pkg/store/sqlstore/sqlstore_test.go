package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/storetest"
)

// quiet keeps the store's log out of test output.
var quiet = slog.New(slog.DiscardHandler)

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), Options{Sync: "normal", Log: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	// The default, full: writes answered by the WAL's own syncer.
	storetest.Run(t, func(t *testing.T) store.Store { return openFull(t) })
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	// A name that needs escaping in a SQLite URI.
	path := filepath.Join(t.TempDir(), "a?b#c%d.db")
	s, err := Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 123e6, time.UTC)
	w := &store.Write{
		Record: store.Record{Type: "Patient", ID: "a", Version: "1", Time: at, Project: "p", JSON: []byte(`{"id":"a"}`)},
		Fields: map[string]any{"s_name": []string{"ann"}},
		Event:  []byte("ev"),
	}
	if err := s.Write(ctx, w); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := s.SetSecret(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("SetSecret: %v", err)
	}
	if _, err := s.Claim(ctx, "c", "me"); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Write(ctx, w); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}

	s, err = Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	r, err := s.Get(ctx, "Patient", "a")
	if err != nil || r.Version != "1" || !r.Time.Equal(at) || string(r.JSON) != `{"id":"a"}` {
		t.Fatalf("Get after reopen: %+v, %v", r, err)
	}
	rs, err := s.Search(ctx, "Patient", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_name", "ann")}})
	if err != nil || len(rs) != 1 {
		t.Fatalf("Search after reopen: %d, %v", len(rs), err)
	}
	if v, err := s.Secret(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Secret after reopen: %q, %v", v, err)
	}
	if o, err := s.ClaimOwner(ctx, "c"); err != nil || o != "me" {
		t.Fatalf("ClaimOwner after reopen: %q, %v", o, err)
	}
	if p, err := s.Pending(ctx, time.Now().Add(time.Minute), time.Time{}); err != nil || len(p) != 1 {
		t.Fatalf("Pending after reopen: %v, %v", p, err)
	}
	var v string
	if err := s.rdb.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'schema_version'").Scan(&v); err != nil || v != fmt.Sprint(schemaVersion) {
		t.Fatalf("schema version %q, %v", v, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	s, err := Open(ctx, path, Options{Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	err = s.w.do(ctx, "", 0, false, func(c *wconn) error {
		_, err := c.conn.ExecContext(c.ctx, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")
		return err
	})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, path, Options{Log: quiet}); err == nil {
		s.Close()
		t.Fatal("opened a database of a newer schema")
	}
}

// TestCancelledBeforeTurn: a caller whose context has ended gets its error
// and nothing is written.
func TestCancelledBeforeTurn(t *testing.T) {
	s := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := &store.Write{Record: store.Record{Type: "Patient", ID: "a", Version: "1", Time: time.Now(), Project: "p", JSON: []byte("{}")}}
	if err := s.Write(ctx, w); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write: %v", err)
	}
	// Blocked behind a slow call, a caller that gives up is skipped.
	release := make(chan struct{})
	started := make(chan struct{})
	go s.w.do(context.Background(), "", 0, false, func(*wconn) error { close(started); <-release; return nil })
	<-started
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Write(ctx, w); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write: %v", err)
	}
	close(release)
	if err := s.Write(context.Background(), &store.Write{Record: store.Record{Type: "Patient", ID: "b", Version: "1", Time: time.Now(), JSON: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "Patient", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancelled write stored: %v", err)
	}
}

// TestGroupCommit: calls queued while the writer is busy share one
// transaction, and a failing one among them spoils none of the others.
func TestGroupCommit(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	mk := func(id string) *store.Write {
		return &store.Write{Record: store.Record{Type: "Patient", ID: id, Version: "1", Time: time.Now(), Project: "p", JSON: []byte("{}")},
			Fields: map[string]any{"s_g": "g"}}
	}
	if err := s.Write(ctx, mk("taken")); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	go s.w.do(ctx, "", 0, false, func(*wconn) error { close(started); <-release; return nil })
	<-started
	before := s.w.txs.Load()
	const n = 50
	errs := make(chan error, n+1)
	for i := range n {
		go func() { errs <- s.Write(ctx, mk(fmt.Sprint(i))) }()
	}
	go func() { errs <- s.Write(ctx, mk("taken")) }()
	eventually(t, fmt.Sprintf("%d writes queued behind the busy writer", n+1), func() bool { return s.w.queue.len() >= n+1 })
	close(release)
	exists := 0
	for range n + 1 {
		switch err := <-errs; {
		case errors.Is(err, store.ErrExists):
			exists++
		case err != nil:
			t.Fatal(err)
		}
	}
	if exists != 1 {
		t.Fatalf("%d creates of the taken id failed, want 1", exists)
	}
	if txs := s.w.txs.Load() - before; txs != 1 {
		t.Fatalf("%d calls took %d transactions, want 1", n+1, txs)
	}
	if c, err := s.Count(ctx, "Patient", &store.Query{Filter: []store.Cond{store.Eq("s_g", "g")}}); err != nil || c != n+1 {
		t.Fatalf("Count %d, %v; want %d", c, err, n+1)
	}
}

// TestSubMillisecond: comparisons with instants finer than the stored
// milliseconds stay exact.
func TestSubMillisecond(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &store.Write{Record: store.Record{Type: "T", ID: "a", Version: "1", Time: t0, Project: "p", JSON: []byte("{}")}, Fields: map[string]any{"s_d": t0}}
	if err := s.Write(ctx, w); err != nil {
		t.Fatal(err)
	}
	get := func(f string) (any, bool) {
		if f == store.FieldTime {
			return t0, true
		}
		return t0, f == "s_d"
	}
	half := 500 * time.Microsecond
	for _, f := range []string{"s_d", store.FieldTime} {
		for _, c := range []store.Cond{
			store.Compare(f, store.OpLt, t0.Add(half)), store.Compare(f, store.OpLe, t0.Add(half)),
			store.Compare(f, store.OpGt, t0.Add(-half)), store.Compare(f, store.OpGe, t0.Add(-half)),
			store.Compare(f, store.OpGt, t0.Add(half)), store.Compare(f, store.OpLt, t0.Add(-half)),
			store.Eq(f, t0.Add(half)), store.Eq(f, t0),
		} {
			n, err := s.Count(ctx, "T", &store.Query{Filter: []store.Cond{c}})
			if want := store.Matches(c, get); err != nil || (n == 1) != want {
				t.Errorf("%s op%d %v: count %d (%v), Matches %v", f, c.Op, c.Values[0], n, err, want)
			}
		}
	}
}

// TestPlans: every search shape of shapes_test.go, and the store-level
// ones below, reads a page straight off an index walk confined to its
// project: no scan of a table, no sort of everything found, and no index
// range that other projects' rows share. Without ANALYZE statistics (Pinion
// runs none) SQLite's plan follows from the statement alone, so these
// hold at any size.
func TestPlans(t *testing.T) {
	s := openTemp(t)
	prefix := store.Cond{Op: store.OpPrefix, Field: "s_name", Values: []any{"smi"}}
	cases := []struct {
		name string
		q    *store.Query
		// sorted: a plan that gathers and sorts is right here (an id
		// list, or a general form for few matches).
		sorted bool
	}{
		{"prefix in every project", &store.Query{Filter: []store.Cond{prefix}, Limit: 20}, false},
		{"two equalities", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_code", "a"), store.Eq("s_subject", "Patient/1")}, Limit: 20}, false},
		{"number beyond", &store.Query{Project: "p", Filter: []store.Cond{store.Compare("s_n", store.OpGt, 3.0)}, Limit: 20}, false},
		{"id", &store.Query{Project: "p", Filter: []store.Cond{store.Eq(store.FieldID, "a", "b"), prefix}, Limit: 20}, true},
		{"missing field", &store.Query{Project: "p", Filter: []store.Cond{store.Exists("s_x", false)}, Limit: 20}, false},
		{"not in", &store.Query{Project: "p", Filter: []store.Cond{{Op: store.OpNotIn, Field: "s_gender", Values: []any{"male"}}}, Limit: 20}, false},
		{"filtered, by time", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_gender", "female")}, Sort: []store.Sort{{Field: store.FieldTime, Desc: true}}, Limit: 20}, false},
		{"few, sorted", &store.Query{Project: "p", Filter: []store.Cond{store.Eq("s_code", "a")}, Sort: []store.Sort{{Field: "s_name"}, {Field: store.FieldID}}, Limit: 20}, true},
	}
	for _, sh := range shapes {
		cases = append(cases, struct {
			name   string
			q      *store.Query
			sorted bool
		}{sh, shapeQuery(t, "p", sh), false})
	}
	for _, c := range cases {
		for _, st := range statements(t, c.q) {
			plan := explain(t, s, st.text, st.args...)
			if bad := scans(plan); bad != "" {
				t.Errorf("%s (%s): %q scans:\n%s\nSQL: %s", c.name, st.what, bad, plan, st.text)
			}
			if !c.sorted && strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("%s (%s): plan sorts what it found:\n%s\nSQL: %s", c.name, st.what, plan, st.text)
			}
			if c.q.Project != "" {
				if l := unconfined(plan); l != "" {
					t.Errorf("%s (%s): %q reads other projects' rows:\n%s\nSQL: %s", c.name, st.what, l, plan, st.text)
				}
			}
		}
	}
	for _, c := range []struct{ name, text, index string }{
		{"Get", getSQL, "resources_type_id (type=? AND id=?)"},
		{"GetVersion", versionSQL, "sqlite_autoindex_history_1 (rid=? AND version=?)"},
		{"History", historySQL, "history_newest (rid=?)"},
		{"Pending", pendingSQL, "history_pending (at<?)"},
	} {
		args := []any{"Patient", "a", "1"}
		if c.name == "Pending" {
			args = []any{time.Now().UnixMilli(), 10}
		}
		plan := explain(t, s, c.text, args...)
		if !strings.Contains(plan, c.index) || strings.Contains(plan, "TEMP B-TREE") || scans(plan) != "" {
			t.Errorf("%s:\n%s", c.name, plan)
		}
	}
}

func explain(t testing.TB, s *Store, text string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.Query("EXPLAIN QUERY PLAN "+text, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", text, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	return b.String()
}

type statement struct {
	what, text string
	args       []any
}

// statements lists what Search may run for q: every driver's stream, a
// sorted search's two parts, or the one statement of the other shapes.
func statements(t *testing.T, q *store.Query) []statement {
	t.Helper()
	var out []statement
	if ds := drivers(q); len(q.Sort) == 0 && len(ds) > 0 {
		for _, d := range ds {
			text, args := streamSQL("Patient", q, d)
			out = append(out, statement{"walking " + d.field, text, args})
		}
		return out
	}
	if ordered(q) && q.Sort[0].Field != store.FieldTime {
		for _, present := range []bool{true, false} {
			text, args := sortedSQL("Patient", q, present, false)
			out = append(out, statement{fmt.Sprint("sorted, present ", present), text, args})
		}
		text, args := sortedSQL("Patient", q, true, true)
		return append(out, statement{"sorted, count", text, args})
	}
	text, args, err := searchSQL("Patient", q, false)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, statement{"search", text, args})
}

// unconfined returns the first step of plan that walks an index range
// other projects' rows share: a range of the search table or of
// resources_list that does not fix the project. Lookups by rid are one
// resource's rows.
func unconfined(plan string) string {
	for _, l := range strings.Split(plan, "\n") {
		l = strings.TrimSpace(l)
		ranged := strings.Contains(l, "USING PRIMARY KEY (key=") || strings.Contains(l, "resources_list")
		if strings.HasPrefix(l, "SEARCH ") && ranged && !strings.Contains(l, "project=?") {
			return l
		}
	}
	return ""
}

// scans returns a plan line that reads a whole table, or "".
func scans(plan string) string {
	for _, l := range strings.Split(plan, "\n") {
		l = strings.TrimSpace(l)
		for _, tbl := range []string{"resources", "r", "search", "s", "history"} {
			if l == "SCAN "+tbl || strings.HasPrefix(l, "SCAN "+tbl+" ") {
				return l
			}
		}
	}
	return ""
}

func benchFields(i int) map[string]any {
	return map[string]any{
		"s_name":         []string{fmt.Sprintf("smith%05d", i%50000), "ann", "ann smith"},
		"s_name_exact":   []string{"Smith", "Ann"},
		"s_name_sort":    "ann smith",
		"s_identifier":   []string{fmt.Sprintf("sys|%d", i), fmt.Sprintf("|%d", i)},
		"s_birthdate_lo": time.Date(1950+i%60, 1, 1, 0, 0, 0, 0, time.UTC),
		"s_birthdate_hi": time.Date(1950+i%60, 1, 1, 23, 59, 59, 999e6, time.UTC),
		"s_gender":       []string{[]string{"male", "female", "other"}[i%3]},
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if grownPath != "" {
		os.RemoveAll(filepath.Dir(grownPath))
	}
	os.Exit(code)
}

// TestWritesTakeTurns: a project's small write queued behind another
// project's heavy ones (transaction Bundles) waits for one of them, not
// for all; and heavy calls run in transactions of their own.
func TestWritesTakeTurns(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	go s.w.do(ctx, "", 0, false, func(*wconn) error { close(started); <-release; return nil })
	<-started
	var mu sync.Mutex
	var order []string
	call := func(key, name string, size int) chan error {
		done := make(chan error, 1)
		go func() {
			done <- s.w.do(ctx, key, size, false, func(*wconn) error {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, name)
				return nil
			})
		}()
		return done
	}
	var dones []chan error
	for i := range 4 {
		dones = append(dones, call("busy", fmt.Sprint("heavy", i), heavyBytes+1))
		eventually(t, fmt.Sprintf("heavy call %d queued", i), func() bool { return s.w.queue.len() >= i+1 })
	}
	dones = append(dones, call("quiet", "small", 100))
	eventually(t, "the small call queued behind the heavy ones", func() bool { return s.w.queue.len() >= 5 })
	before := s.w.txs.Load()
	close(release)
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"heavy0", "small", "heavy1", "heavy2", "heavy3"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if txs := s.w.txs.Load() - before; txs != 5 {
		t.Fatalf("%d transactions, want 5: a heavy call shared one", txs)
	}
}
