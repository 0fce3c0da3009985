package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	_ "modernc.org/sqlite"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// signIns are n sign-in events of a project.
func signIns(project string, n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{ID: fmt.Sprintf("%s-ev-%d", project, i), Kind: SignIn.Name, Project: project,
			Time: time.Date(2026, 12, 7, 10, 0, i, 0, time.UTC), Outcome: Success,
			Who: "User/u" + fmt.Sprint(i), Client: "ClientApplication/c1", Address: "10.0.0.1"}
	}
	return evs
}

// A sign-in is BALP's authentication event: DICOM's User Authentication
// and Login, Pinion's own code beside it, who (with the address) and
// through which client.
func TestEventResource(t *testing.T) {
	e := Event{Kind: SignIn.Name, Time: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC), Outcome: MinorFailure,
		Detail: "Email or password is invalid", Name: "ada@example.com", Client: "ClientApplication/c1", Address: "10.0.0.1",
		Patients: []string{"Patient/p1", "Patient/p1"}}
	got, _ := json.Marshal(e.Resource())
	want := `{"action":"E",` +
		`"agent":[{"name":"ada@example.com","network":{"address":"10.0.0.1","type":"2"},"requestor":true},` +
		`{"requestor":false,"type":{"coding":[{"code":"110150","display":"Application","system":"http://dicom.nema.org/resources/ontology/DCM"}]},"who":{"reference":"ClientApplication/c1"}}],` +
		`"entity":[{"role":{"code":"1","display":"Patient","system":"http://terminology.hl7.org/CodeSystem/object-role"},"type":{"code":"1","display":"Person","system":"http://terminology.hl7.org/CodeSystem/audit-entity-type"},"what":{"reference":"Patient/p1"}}],` +
		`"outcome":"4","outcomeDesc":"Email or password is invalid","recorded":"2026-12-07T10:00:00.000Z","resourceType":"AuditEvent",` +
		`"source":{"observer":{"display":"Pinion"},"type":[{"code":"4","display":"Application Server","system":"http://terminology.hl7.org/CodeSystem/security-source-type"}]},` +
		`"subtype":[{"code":"110122","display":"Login","system":"http://dicom.nema.org/resources/ontology/DCM"},{"code":"sign-in","display":"Sign-in","system":"https://pinion.health/fhir/CodeSystem/audit-event"}],` +
		`"type":{"code":"110114","display":"User Authentication","system":"http://dicom.nema.org/resources/ontology/DCM"}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// Every kind names itself once, with a type and an action.
func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		if seen[k.Name] || k.Name == "" || k.Type.Code == "" || k.Display == "" {
			t.Errorf("kind %+v: repeated or incomplete", k)
		}
		seen[k.Name] = true
		switch k.Action {
		case "C", "R", "U", "D", "E":
		default:
			t.Errorf("kind %s: action %q", k.Name, k.Action)
		}
	}
}

// Events recorded go through the stream to the store, chained, and the
// chain verifies whole; a repeated write of the same events (a delivery
// after a crash) stores nothing twice.
func TestRecordWriteVerify(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	_, stop := tr.runWriter()
	rec := NewRecorder(tr.js)
	for _, e := range append(signIns("p1", 40), signIns("", 3)...) {
		if err := rec.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "every event stored", func() bool {
		return tr.verify("p1").Events == 40 && tr.verify("").Events == 3
	})
	for _, p := range []string{"p1", ""} {
		if rep := tr.verify(p); !rep.Whole || rep.From != 1 || rep.Head.Seq != rep.Events {
			t.Fatalf("project %q: %+v", p, rep)
		}
	}
	res, err := tr.repo.Read(ctx, repo.AllProjects, "AuditEvent", ID("p1", 1))
	if err != nil || res.Project != "p1" {
		t.Fatalf("the first event: %v %+v", err, res)
	}
	l, _, _ := linkOf(res.JSON)
	if l.Event != "p1-ev-0" || l.Prev != "" {
		t.Fatalf("the first event is %+v, want the first recorded, after nothing", l)
	}

	// The same events again, by a writer that starts afresh.
	stop()
	again := NewWriter(tr.repo, tr.js, quiet)
	if err := again.Write(context.Background(), "p1", signIns("p1", 40)[30:]); err != nil {
		t.Fatal(err)
	}
	if rep := tr.verify("p1"); !rep.Whole || rep.Events != 40 {
		t.Fatalf("after a repeated delivery: %+v", rep)
	}
}

// Two writers of one project, racing: every event once, the chain whole.
func TestWritersRace(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	evs := signIns("p1", 60)
	var wg sync.WaitGroup
	for i := range 3 {
		w := NewWriter(tr.repo, tr.js, quiet)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < len(evs); j += 3 {
				if err := w.Write(ctx, "p1", evs[j:j+1]); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rep := tr.verify("p1")
	if !rep.Whole || rep.Events != 60 {
		t.Fatalf("%+v", rep)
	}
	seen := map[string]bool{}
	for seq := int64(1); seq <= 60; seq++ {
		res, err := tr.repo.Read(ctx, repo.AllProjects, "AuditEvent", ID("p1", seq))
		if err != nil {
			t.Fatal(err)
		}
		l, _, _ := linkOf(res.JSON)
		if seen[l.Event] {
			t.Fatalf("event %s stored twice", l.Event)
		}
		seen[l.Event] = true
	}
}

// What is done to the stored events underneath the API — an edit, a
// deletion, two events swapped, the JSON of one replaced by another's —
// Verify finds, at the place it was done, in SQLite and in MongoDB.
func TestVerifyFindsTampering(t *testing.T) { verifyFindsTampering(t, newTrail) }

func TestVerifyFindsTamperingInMongoDB(t *testing.T) { verifyFindsTampering(t, newMongoTrail) }

func verifyFindsTampering(t *testing.T, newTrail func(testing.TB) *trail) {
	for _, tc := range []struct {
		name    string
		tamper  func(tr *trail)
		seq     int64
		problem string
	}{
		{"an outcome edited", func(tr *trail) {
			tr.editJSON(ID("p1", 7), `"outcome":"0"`, `"outcome":"4"`)
		}, 7, Edited},
		{"an edit with its digest recomputed", func(tr *trail) {
			res := tr.stored(ID("p1", 7))
			var m map[string]any
			_ = json.Unmarshal(res, &m)
			m["outcome"] = "4"
			delete(m, "meta")
			l, _, _ := linkOf(res)
			seal(m, "p1", 7, l.Prev, l.Event)
			b, _ := json.Marshal(m)
			tr.setJSON(ID("p1", 7), b)
		}, 8, Misplace},
		{"an event deleted", func(tr *trail) {
			tr.remove(ID("p1", 5))
		}, 5, Missing},
		{"an event marked deleted", func(tr *trail) {
			tr.markDeleted(ID("p1", 5))
		}, 5, Missing},
		{"two events swapped", func(tr *trail) {
			a, b := tr.stored(ID("p1", 3)), tr.stored(ID("p1", 4))
			tr.setJSON(ID("p1", 3), b)
			tr.setJSON(ID("p1", 4), a)
		}, 3, Misplace},
		{"an event's JSON replaced by another's", func(tr *trail) {
			tr.setJSON(ID("p1", 9), tr.stored(ID("p1", 2)))
		}, 9, Misplace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrail(t)
			w := NewWriter(tr.repo, tr.js, quiet)
			if err := w.Write(context.Background(), "p1", signIns("p1", 12)); err != nil {
				t.Fatal(err)
			}
			if rep := tr.verify("p1"); !rep.Whole || rep.Events != 12 {
				t.Fatalf("before: %+v", rep)
			}
			tc.tamper(tr)
			rep := tr.verify("p1")
			want := &Break{Seq: tc.seq, ID: ID("p1", tc.seq), Problem: tc.problem}
			if rep.Whole || !reflect.DeepEqual(rep.Break, want) || rep.Events != tc.seq-1 {
				t.Fatalf("%+v %+v, want %+v after %d whole", rep, rep.Break, want, tc.seq-1)
			}
		})
	}
}

// Events recorded at once go out together, a message per project, each
// caller answered once its own is stored; many callers at once lose
// nothing and keep each caller's order in its project's chain.
func TestRecorderGroups(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	rec := NewRecorder(tr.js)

	// A group as the recorder takes it off its queue: two projects.
	var group []*pending
	for i, e := range append(signIns("g1", 3), signIns("g2", 2)...) {
		e.Time = time.Unix(int64(i), 0)
		b, _ := json.Marshal(e)
		group = append(group, &pending{id: e.ID, project: e.Project, data: b, done: make(chan error, 1)})
	}
	rec.publish(group)
	for _, p := range group {
		if err := <-p.done; err != nil {
			t.Fatal(err)
		}
	}
	s, err := tr.js.Stream(ctx, Stream)
	if err != nil {
		t.Fatal(err)
	}
	for project, want := range map[string][]string{"g1": {"g1-ev-0", "g1-ev-1", "g1-ev-2"}, "g2": {"g2-ev-0", "g2-ev-1"}} {
		m, err := s.GetLastMsgForSubject(ctx, subjectOf(project))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.ID)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s's message holds %v, want %v", project, got, want)
		}
	}
	if info, _ := s.Info(ctx); info.State.Msgs != 2 {
		t.Fatalf("%d messages for two projects", info.State.Msgs)
	}

	// Many callers at once, through the writer.
	tr.runWriter()
	var wg sync.WaitGroup
	for c := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				e := Event{ID: fmt.Sprintf("c%d-%d", c, i), Kind: SignIn.Name, Project: fmt.Sprintf("p%d", c%3), Who: "User/u"}
				if err := rec.Record(ctx, e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	testenv.Eventually(t, "every event stored", func() bool {
		return tr.verify("p0").Events == 80 && tr.verify("p1").Events == 80 && tr.verify("p2").Events == 80
	})
	last := map[string]int{}
	for seq := int64(1); seq <= 80; seq++ {
		res, err := tr.repo.Read(ctx, repo.AllProjects, "AuditEvent", ID("p1", seq))
		if err != nil {
			t.Fatal(err)
		}
		l, _, _ := linkOf(res.JSON)
		var c, i int
		fmt.Sscanf(l.Event, "c%d-%d", &c, &i)
		if prev, ok := last[fmt.Sprint(c)]; ok && i != prev+1 {
			t.Fatalf("caller %d's event %d after its %d", c, i, prev)
		}
		last[fmt.Sprint(c)] = i
	}
	if rep := tr.verify("p1"); !rep.Whole {
		t.Fatalf("%+v", rep)
	}
}

// An event's free texts are cut, so that none makes a message too long.
func TestRecorderCutsTexts(t *testing.T) {
	tr := newTrail(t)
	rec := NewRecorder(tr.js)
	long := strings.Repeat("é", 4000)
	if err := rec.Record(context.Background(), Event{ID: "long", Kind: SignIn.Name, Name: long, Detail: long,
		Entities: []Entity{{Detail: long, Query: long}}}); err != nil {
		t.Fatal(err)
	}
	s, _ := tr.js.Stream(context.Background(), Stream)
	m, err := s.GetLastMsgForSubject(context.Background(), subjectOf(""))
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := Decode(m.Data)
	if len(evs) != 1 || len(evs[0].Name) > maxText || len(evs[0].Detail) > maxText || !utf8.ValidString(evs[0].Name) ||
		len(evs[0].Entities[0].Detail) > maxText || len(evs[0].Entities[0].Query) > maxText {
		t.Fatalf("%d events, name %d bytes", len(evs), len(evs[0].Name))
	}
}

// The queue of events waiting for the stream is bounded, and an event
// whose caller stopped waiting (its request refused for it) is dropped,
// not published after its request was answered.
func TestRecorderQueueBounds(t *testing.T) {
	tr := newTrail(t)
	rec := NewRecorder(tr.js)
	rec.running = true // as though a publish hung: nothing takes the queue
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rec.Record(done, Event{ID: "abandoned", Kind: SignIn.Name, Project: "q"}); err == nil {
		t.Fatal("a caller that stopped waiting was told its event is recorded")
	}
	for len(rec.queue) < maxQueued {
		rec.queue = append(rec.queue, &pending{})
	}
	if err := rec.Record(context.Background(), Event{Kind: SignIn.Name}); err == nil || !strings.Contains(err.Error(), "wait for the stream") {
		t.Fatalf("a full queue: %v", err)
	}
	rec.queue = rec.queue[:1] // the abandoned event alone
	rec.publishQueue()
	s, _ := tr.js.Stream(context.Background(), Stream)
	if _, err := s.GetLastMsgForSubject(context.Background(), subjectOf("q")); err == nil {
		t.Fatal("the abandoned event was published")
	}
}

// A walk bounded in time goes on from where the last stopped, each at
// least minWalk events, and still finds a break past its first part.
func TestVerifyWithinParts(t *testing.T) {
	tr := newTrail(t)
	ctx := context.Background()
	if err := NewWriter(tr.repo, tr.js, quiet).Write(ctx, "p1", signIns("p1", 250)); err != nil {
		t.Fatal(err)
	}
	past := Limits{Until: time.Now().Add(-time.Second)}
	walk := func(lim Limits) *Report {
		t.Helper()
		rep, err := VerifyWithin(ctx, tr.repo, "p1", lim)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := walk(past)
	if rep.Whole || rep.Break != nil || rep.Next != minWalk+1 || rep.Events != minWalk {
		t.Fatalf("the first part: %+v", rep)
	}
	walked := rep.Events
	for rep.Next != 0 {
		past.After = rep.Next - 1
		rep = walk(past)
		walked += rep.Events
	}
	if !rep.Whole || walked != 250 || rep.Head.Seq != 250 {
		t.Fatalf("the parts: %d events, last %+v", walked, rep)
	}

	tr.editJSON(ID("p1", 150), `"outcome":"0"`, `"outcome":"4"`)
	past.After = minWalk
	if rep := walk(past); rep.Break == nil || rep.Break.Seq != 150 || rep.Break.Problem != Edited {
		t.Fatalf("a break in the second part: %+v", rep)
	}
	// A place past the chain's end is no place to go on from: a 400.
	var fe *fhir.Error
	if _, err := VerifyWithin(ctx, tr.repo, "p1", Limits{After: 9999}); !errors.As(err, &fe) || fe.Status != 400 {
		t.Fatalf("going on from past the end: %v", err)
	}
	// An edited place to go on from is itself the break.
	past.After = 150
	if rep := walk(past); rep.Break == nil || rep.Break.Seq != 150 {
		t.Fatalf("going on from an edited place: %+v", rep)
	}
}
