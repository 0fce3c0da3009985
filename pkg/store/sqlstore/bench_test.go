package sqlstore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/store"
)

// The benchmarks run on a grown store, 100,000 Patients in four projects,
// as users' stores only grow: what is fast on an empty one says little.
// Building it takes about half a minute, once per run of the benchmarks.
const grownSize = 100_000

var (
	grownOnce sync.Once
	grownPath string
	grownErr  error
)

// grown opens a copy of the grown store for this benchmark to change.
func grown(b *testing.B, sync string) *Store {
	b.Helper()
	grownOnce.Do(func() { grownPath, grownErr = buildGrown() })
	if grownErr != nil {
		b.Fatal(grownErr)
	}
	path := filepath.Join(b.TempDir(), "grown.db")
	if err := copyFile(grownPath, path); err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), path, Options{Sync: sync, Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func buildGrown() (string, error) {
	dir, err := os.MkdirTemp("", "sqlstore-bench")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "grown.db")
	ctx := context.Background()
	s, err := Open(ctx, path, Options{Sync: "off", Log: quiet})
	if err != nil {
		return path, err
	}
	defer s.Close()
	var ws []*store.Write
	for i := range grownSize {
		ws = append(ws, &store.Write{
			Record: store.Record{Type: "Patient", ID: fmt.Sprint(i), Version: "1", Time: time.Now().UTC(), Project: fmt.Sprint("p", i%4),
				JSON: []byte(`{"resourceType":"Patient","name":[{"family":"Smith"}]}`)},
			Fields: benchFields(i),
		})
		if len(ws) == 1000 {
			if err := s.Write(ctx, ws...); err != nil {
				return path, err
			}
			ws = ws[:0]
		}
	}
	return path, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkSearch runs the typical searches on the grown store; each
// query's plan must use indexes, not scan a table.
func BenchmarkSearch(b *testing.B) {
	s := grown(b, "full")
	ctx := context.Background()
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
		b.Run(c.name, func(b *testing.B) {
			text, args, err := searchSQL("Patient", &c.q, false)
			if err != nil {
				b.Fatal(err)
			}
			if bad := scans(explain(b, s, text, args...)); bad != "" {
				b.Fatalf("%s scans: %s", c.name, bad)
			}
			for b.Loop() {
				if _, err := s.Search(ctx, "Patient", &c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWrite creates Patients in the grown store from 8 goroutines
// per core, so that group commit has calls to gather.
func BenchmarkWrite(b *testing.B) {
	for _, mode := range []string{"full", "normal"} {
		b.Run("sync="+mode, func(b *testing.B) {
			s := grown(b, mode)
			var n atomic.Int64
			at := time.Now().UTC()
			txs := s.w.txs.Load()
			written := writtenBytes()
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				var mine []time.Duration
				defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
				for pb.Next() {
					t0 := time.Now()
					i := grownSize + n.Add(1)
					w := &store.Write{
						// Random ids, as the API makes them: each lands on its own index page.
						Record: store.Record{Type: "Patient", ID: uuid.NewString(), Version: "1", Time: at, Project: "p1",
							JSON: []byte(`{"resourceType":"Patient","name":[{"family":"Smith","given":["Ann"]}]}`)},
						Fields: benchFields(int(i)),
						Event:  []byte(`{"type":"create"}`),
					}
					if err := s.Write(ctx, w); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
				}
			})
			b.ReportMetric(float64(n.Load())/float64(s.w.txs.Load()-txs), "calls/tx")
			// The tail is what a caller waits when a commit stalls (a
			// checkpoint, an fsync behind one).
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			}
			if written >= 0 {
				// What the disk is asked to take per write: the WAL frames
				// and their checkpoints, most of it whole pages for a few
				// search rows.
				b.ReportMetric(float64(writtenBytes()-written)/float64(n.Load()), "disk-B/op")
			}
		})
	}
}

// writtenBytes is what this process has sent to storage so far (Linux's
// /proc/self/io write_bytes), or -1 where that is not known.
func writtenBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
