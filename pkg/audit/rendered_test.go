package audit

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// The writer seals events as rendered types; Verify recomputes each
// digest from the stored JSON read back as a map. For every kind, with
// every field empty and with each filled (texts that JSON escapes
// included), the two agree, and the map is the one seal makes.
func TestRenderedIsTheMap(t *testing.T) {
	full := Event{ID: "e", Project: "p1", Time: time.Date(2026, 12, 7, 10, 0, 0, 123e6, time.UTC), Outcome: MinorFailure,
		Action: "U", Detail: `refused: <"quoted"> & é`, Who: "User/1", Name: "ann@example.com", Client: "ClientApplication/c",
		Address: "2001:db8::1", Patients: []string{"Patient/a", "Patient/b"},
		Entities: []Entity{{What: "Patient/a"}, {What: "ProjectMembership/m", Detail: "admin=true"}, {Query: "Observation?code=a&b=<c>"}, {}}}
	var events []Event
	for _, k := range Kinds {
		events = append(events, Event{ID: "e-" + k.Name, Kind: k.Name, Time: full.Time})
		f := full
		f.Kind = k.Name
		events = append(events, f)
	}
	events = append(events, Event{ID: "unknown", Kind: "a-kind-of-a-newer-build", Time: full.Time},
		Event{ID: "same", Kind: SignIn.Name, Who: "ClientApplication/c", Client: "ClientApplication/c", Time: full.Time})
	prev := Link{}
	for i, e := range events {
		r := e.render()
		l := sealRendered(r, "p1", int64(i+1), prev.Digest, e.ID)
		r.Meta = &renderedMeta{VersionID: "1", LastUpdated: r.Recorded, Project: "p1"}
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		stored, computed, err := linkOf(raw)
		if err != nil || stored != l || computed != l.Digest {
			t.Fatalf("%s: the digest read back is %s (%v), sealed %s:\n%s", e.Kind, computed, err, l.Digest, raw)
		}
		// The same event sealed as a map, as seal does for a resource.
		m := e.Resource()
		fhir.DropEmpty(m)
		if ml := seal(m, "p1", int64(i+1), prev.Digest, e.ID); ml != l {
			t.Fatalf("%s: sealed as a map %+v, as a type %+v", e.Kind, ml, l)
		}
		prev = l
	}
	if got := fmt.Sprint(full.Resource()["entity"]); len(full.Resource()["entity"].([]any)) != 4 {
		t.Fatalf("entities %s: want the patient, the membership, the query and the second patient (the empty one left out)", got)
	}
}
