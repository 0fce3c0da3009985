package sqlstore

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// The search shapes users run most, as FHIR queries: each must cost about
// the same at 100,000 Patients as at 1,000, and the same in a small
// project whether or not a big one lives beside it.
var shapes = []string{
	"name=mar",
	"family=smith",
	"birthdate=ge1940-01-01",
	"_sort=family",
	"_sort=-family",
	"name:contains=mit",
	"family:contains=smit",
	"_sort=-_lastUpdated",
	"gender=female",
	"_offset=1000",
	"_offset=980",
	"gender=female&_sort=birthdate",
	"_lastUpdated=gt2000-01-01",
	"birthdate=1950-06-01",
	"birthdate=lt1930-01-01",
}

var (
	families = []string{"Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
		"Schmitt", "Mitchell", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore"}
	givens = []string{"Maria", "James", "Mark", "Linda", "Robert", "Mary", "John", "Patricia", "Martin", "Jennifer",
		"Michael", "Elizabeth", "William", "Barbara", "David", "Susan", "Richard", "Jessica", "Joseph", "Sarah"}
)

// person is the i-th Patient: names skewed so a few are common.
func person(i int) map[string]any {
	// Skewed: index k with weight ~1/(k+1) over a longer tail of rare names.
	fam := families[(i*7)%len(families)]
	if i%3 == 0 {
		fam = fmt.Sprintf("Rare%05d", i%20011)
	}
	return map[string]any{
		"resourceType": "Patient",
		"name":         []any{map[string]any{"family": fam, "given": []any{givens[(i*13)%len(givens)]}}},
		"gender":       []string{"male", "female", "other", "unknown"}[(uint32(i)*2654435761>>16)%4],
		"birthDate":    fmt.Sprintf("%04d-%02d-%02d", 1920+i%100, 1+i%12, 1+i%28),
	}
}

// loadPeople writes n Patients of project p, their times from t0 on.
func loadPeople(tb testing.TB, s *Store, p string, n int, t0 time.Time) {
	ctx := context.Background()
	var ws []*store.Write
	for i := range n {
		res := person(i)
		ws = append(ws, &store.Write{
			Record: store.Record{Type: "Patient", ID: uuid.NewString(), Version: "1", Time: t0.Add(time.Duration(i) * time.Second), Project: p, JSON: []byte(`{}`)},
			Fields: search.Fields("Patient", res),
		})
		if len(ws) == 1000 || i == n-1 {
			if err := s.Write(ctx, ws...); err != nil {
				tb.Fatal(err)
			}
			ws = ws[:0]
		}
	}
}

func shapeQuery(tb testing.TB, project, shape string) *store.Query {
	v, err := url.ParseQuery(shape)
	if err != nil {
		tb.Fatal(err)
	}
	q, err := search.Parse("Patient", v)
	if err != nil {
		tb.Fatal(err)
	}
	return &store.Query{Project: project, Filter: q.Filter, Sort: q.Sort, Offset: q.Offset, Limit: q.Count + 1}
}

// BenchmarkShapes runs every shape in a project of 100,000 Patients
// (SHAPES_N to change it) and in one of 1,000 beside it: each shape's time
// should be about the same in both, and as at 1,000 alone. Building the
// store takes about half a minute.
func BenchmarkShapes(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("SHAPES_N")); err == nil {
		n = v
	}
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "shapes.db"), Options{Sync: "off", Log: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	loadPeople(b, s, "small", 1000, t0)
	loadPeople(b, s, "big", n, t0)
	ctx := context.Background()
	for _, p := range []string{"small", "big"} {
		for _, sh := range shapes {
			q := shapeQuery(b, p, sh)
			b.Run(p+"/"+sh, func(b *testing.B) {
				for b.Loop() {
					if _, err := s.Search(ctx, "Patient", q); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
