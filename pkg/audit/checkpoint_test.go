package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// smallAnchors makes an anchor every n places for one test.
func smallAnchors(t *testing.T, n int64) {
	was := anchorEvery
	anchorEvery = n
	t.Cleanup(func() { anchorEvery = was })
}

// rewrite seals the events from seq on again, the first of them edited
// by change, each after the one before: a chain rewritten with every
// digest recomputed, as someone with the database and the code could.
func (tr *trail) rewrite(project string, from, to int64, change func(map[string]any)) {
	tr.t.Helper()
	prev := ""
	if from > 1 {
		_, l, err := Stored(context.Background(), tr.repo.NewTrailReader(), project, from-1)
		if err != nil {
			tr.t.Fatal(err)
		}
		prev = l.Digest
	}
	out := map[string][]byte{}
	for seq := from; seq <= to; seq++ {
		raw, l, err := Stored(context.Background(), tr.repo.NewTrailReader(), project, seq)
		if err != nil {
			tr.t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			tr.t.Fatal(err)
		}
		delete(m, "meta")
		if seq == from {
			change(m)
		}
		prev = seal(m, project, seq, prev, l.Event).Digest
		b, _ := json.Marshal(m)
		out[ID(project, seq)] = b
	}
	for id, b := range out {
		tr.setJSON(id, b)
	}
}

// What a hash chain alone cannot show, signed checkpoints do: events
// deleted from the chain's end (with or without the latest checkpoint),
// a stretch rewritten with its digests recomputed, a checkpoint that the
// trail's key did not sign; in SQLite and in MongoDB.
func TestCheckpointsFindTampering(t *testing.T) { checkpointsFindTampering(t, newTrail) }

func TestCheckpointsFindTamperingInMongoDB(t *testing.T) {
	checkpointsFindTampering(t, newMongoTrail)
}

func checkpointsFindTampering(t *testing.T, newTrail func(testing.TB) *trail) {
	smallAnchors(t, 5)
	for _, tc := range []struct {
		name    string
		tamper  func(tr *trail)
		seq     int64
		problem string
	}{
		{"the last events deleted", func(tr *trail) {
			tr.remove(ID("p1", 11), ID("p1", 12))
		}, 11, Truncated},
		{"the last events deleted, past an anchor", func(tr *trail) {
			tr.remove(ID("p1", 9), ID("p1", 10), ID("p1", 11), ID("p1", 12))
		}, 9, Truncated},
		{"the last events and the latest checkpoint deleted", func(tr *trail) {
			tr.editSecret(latestKey("p1"), func([]byte) []byte { return nil })
			tr.remove(ID("p1", 7), ID("p1", 8), ID("p1", 9), ID("p1", 10), ID("p1", 11), ID("p1", 12))
		}, 7, Truncated},
		{"a stretch rewritten with its digests recomputed", func(tr *trail) {
			tr.rewrite("p1", 7, 12, func(m map[string]any) { m["outcome"] = "4" })
		}, 10, Rewritten},
		{"the tail rewritten after the last anchor", func(tr *trail) {
			tr.rewrite("p1", 11, 12, func(m map[string]any) { m["outcome"] = "4" })
		}, 12, Rewritten},
		{"the latest checkpoint moved on, unsigned", func(tr *trail) {
			tr.editSecret(latestKey("p1"), func(b []byte) []byte { return bytes.Replace(b, []byte(`"seq":12`), []byte(`"seq":40`), 1) })
		}, 40, Forged},
		{"an anchor's digest replaced", func(tr *trail) {
			_, l, _ := Stored(context.Background(), tr.repo.NewTrailReader(), "p1", 4)
			tr.editSecret(anchorKey("p1", 5), func(b []byte) []byte {
				var c Checkpoint
				_ = json.Unmarshal(b, &c)
				c.Digest = l.Digest
				b, _ = json.Marshal(c)
				return b
			})
		}, 5, Forged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrail(t)
			w := NewWriter(tr.repo, tr.js, quiet)
			if err := w.Write(context.Background(), "p1", signIns("p1", 12)); err != nil {
				t.Fatal(err)
			}
			rep := tr.verify("p1")
			if !rep.Whole || rep.Events != 12 || rep.Checkpoint == nil || rep.Checkpoint.Seq != 12 || !strings.HasPrefix(rep.Key, "ed25519:") {
				t.Fatalf("before: %+v", rep)
			}
			for _, seq := range []int64{5, 10} {
				if a, _, _ := readCheckpoint(context.Background(), tr.repo, anchorKey("p1", seq)); a == nil {
					t.Fatalf("no anchor at %d", seq)
				}
			}
			tc.tamper(tr)
			rep = tr.verify("p1")
			want := &Break{Seq: tc.seq, ID: ID("p1", tc.seq), Problem: tc.problem}
			if rep.Whole || !reflect.DeepEqual(rep.Break, want) {
				t.Fatalf("%+v %+v, want %+v", rep, rep.Break, want)
			}
		})
	}
}

// The writers move the latest checkpoint every anchorEvery events, and
// after checkpointAge to a quiet chain's head; each anchor once.
func TestCheckpointCadence(t *testing.T) {
	smallAnchors(t, 5)
	tr := newTrail(t)
	ctx := context.Background()
	w := NewWriter(tr.repo, tr.js, quiet)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	w.checkpoints.now = func() time.Time { return now }
	latest := func() int64 {
		c, _, err := readCheckpoint(ctx, tr.repo, latestKey("p1"))
		if err != nil || c == nil {
			t.Fatalf("latest: %+v %v", c, err)
		}
		return c.Seq
	}
	evs := signIns("p1", 13)
	var seen []int64
	for i := range evs {
		if err := w.Write(ctx, "p1", evs[i:i+1]); err != nil {
			t.Fatal(err)
		}
		if n := latest(); len(seen) == 0 || seen[len(seen)-1] != n {
			seen = append(seen, n)
		}
	}
	// The first write finds none (so it is due); then every 5 events.
	if want := []int64{1, 6, 11}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("the latest checkpoint went %v, want %v", seen, want)
	}
	for _, seq := range []int64{5, 10} {
		a, _, _ := readCheckpoint(ctx, tr.repo, anchorKey("p1", seq))
		if _, l, _ := Stored(ctx, tr.repo.NewTrailReader(), "p1", seq); a == nil || a.Digest != l.Digest {
			t.Fatalf("anchor %d: %+v", seq, a)
		}
	}
	w.checkpoints.tick(ctx)
	if n := latest(); n != 11 {
		t.Fatalf("a tick before checkpointAge moved it to %d", n)
	}
	now = now.Add(checkpointAge)
	w.checkpoints.tick(ctx)
	if n := latest(); n != 13 {
		t.Fatalf("after checkpointAge a tick moved it to %d, want the head, 13", n)
	}
	if rep := tr.verify("p1"); !rep.Whole || rep.Checkpoint.Seq != 13 {
		t.Fatalf("%+v", rep)
	}
}

// Retention removes the anchors of what it removes; the latest
// checkpoint, after it, still vouches for the chain kept.
func TestRetentionAndCheckpoints(t *testing.T) {
	smallAnchors(t, 5)
	tr := newTrail(t)
	ctx := context.Background()
	if err := NewWriter(tr.repo, tr.js, quiet).Write(ctx, "p1", signIns("p1", 12)); err != nil {
		t.Fatal(err)
	}
	if rm, err := Retain(ctx, tr.repo, nil, "p1", at(11), quiet); err != nil || rm == nil || rm.To != 11 {
		t.Fatalf("removed %+v, %v", rm, err)
	}
	for _, seq := range []int64{5, 10} {
		if a, _, _ := readCheckpoint(ctx, tr.repo, anchorKey("p1", seq)); a != nil {
			t.Fatalf("anchor %d kept", seq)
		}
	}
	rep := tr.verify("p1")
	if !rep.Whole || rep.From != 12 || rep.Checkpoint == nil || rep.Checkpoint.Seq != 12 {
		t.Fatalf("%+v", rep)
	}
	tr.remove(ID("p1", 12))
	if rep := tr.verify("p1"); rep.Whole || rep.Break.Problem != Truncated || rep.Break.Seq != 12 {
		t.Fatalf("%+v %+v", rep, rep.Break)
	}
}
