package repo

import (
	"context"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// A store written before names had trigrams: :contains misses its
// Patients until Reindex computes their fields again, and finds them after.
func TestReindexOlderFields(t *testing.T) {
	ctx := context.Background()
	old, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "old.db"), sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	for i, family := range []string{"Smith", "Goldsmith", "Jones"} {
		body := `{"resourceType":"Patient","id":"p` + strconv.Itoa(i) + `","name":[{"family":"` + family + `"}]}`
		res, err := fhir.Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		fields := search.Fields("Patient", res)
		delete(fields, "s_name_grams") // as the older build stored them
		w := &store.Write{Record: store.Record{Type: "Patient", ID: "p" + strconv.Itoa(i), Version: "1", Time: time.Now(), Project: "p", JSON: []byte(body)}, Fields: fields}
		if err := old.Write(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	r := instanceOn(t, old)

	found := func() int {
		q, err := search.Parse("Patient", url.Values{"name:contains": {"smith"}})
		if err != nil {
			t.Fatal(err)
		}
		page, err := r.Search(ctx, Scope{Project: "p"}, "Patient", q)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Resources)
	}
	if n := found(); n != 0 {
		t.Fatalf("before Reindex, name:contains=smith found %d: the older fields were not older", n)
	}
	if err := r.Reindex(ctx); err != nil {
		t.Fatal(err)
	}
	if n := found(); n != 2 {
		t.Fatalf("after Reindex, name:contains=smith found %d, want 2", n)
	}
}
