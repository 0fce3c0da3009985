package audit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkWriterWrite is the store's cost of one patient-read event, as
// the writer stores them in batches of 256 (SQLite, no fsync): the part of
// the trail's cost that grows with every recorded request.
func BenchmarkWriterWrite(b *testing.B) {
	tr := newTrail(b)
	w := NewWriter(tr.repo, tr.js, quiet)
	ctx := context.Background()
	const n = 256
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += n {
		evs := make([]Event, n)
		for j := range evs {
			p := fmt.Sprintf("Patient/%d", (i+j)%1000)
			evs[j] = Event{ID: fmt.Sprintf("e%d", i+j), Kind: PatientRead.Name, Project: "p1", Time: time.Now(), Outcome: Success,
				Who: "User/0b1d5f6e-0000-4000-8000-000000000001", Address: "127.0.0.1",
				Entities: []Entity{{What: p}}, Patients: []string{p}}
		}
		if err := w.Write(ctx, "p1", evs); err != nil {
			b.Fatal(err)
		}
	}
}
