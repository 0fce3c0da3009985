package sandbox

import (
	"testing"
	"time"
)

// fakeRun is a run that has been executing JavaScript for busy in all, and
// is executing now unless waiting.
func fakeRun(busy time.Duration, waiting bool) *runState {
	st := &runState{}
	if waiting {
		st.busyTotal.Store(int64(busy))
		return st
	}
	st.busySince.Store(time.Now().Add(-busy).UnixNano())
	return st
}

func TestGuardBlame(t *testing.T) {
	const mib = 1 << 20
	type run struct {
		name             string
		baseline, budget uint64
		busy             time.Duration
		waiting          bool
	}
	tests := []struct {
		name string
		heap uint64
		runs []run
		want string // the run blamed, "" for none
	}{
		{"within budget", 150 * mib, []run{{"a", 100 * mib, 64 * mib, time.Second, false}}, ""},
		{"exactly at budget", 164 * mib, []run{{"a", 100 * mib, 64 * mib, time.Second, false}}, ""},
		{"over budget", 165 * mib, []run{{"a", 100 * mib, 64 * mib, time.Second, false}}, "a"},
		{"heap below the baseline", 50 * mib, []run{{"a", 100 * mib, 0, time.Second, false}}, ""},
		{"waiting runs cannot have allocated", 500 * mib, []run{{"a", 100 * mib, 64 * mib, time.Second, true}}, ""},
		{"a run that barely ran is not blamed yet", 500 * mib, []run{{"a", 100 * mib, 64 * mib, 0, false}}, ""},
		{"the busiest of those over budget", 500 * mib, []run{
			{"a", 100 * mib, 64 * mib, 10 * time.Millisecond, false},
			{"b", 100 * mib, 64 * mib, time.Second, false},
			{"c", 100 * mib, 64 * mib, 100 * time.Millisecond, false},
		}, "b"},
		{"a busier run within its budget is spared", 300 * mib, []run{
			{"small", 200 * mib, 64 * mib, 10 * time.Millisecond, false},
			{"big", 100 * mib, 512 * mib, time.Second, false},
		}, "small"},
		{"the waiting one over budget is spared for the one running", 300 * mib, []run{
			{"waiter", 100 * mib, 16 * mib, time.Hour, true},
			{"hog", 100 * mib, 96 * mib, 10 * time.Millisecond, false},
		}, "hog"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &memGuard{runs: map[*runState]*guardedRun{}}
			names := map[*guardedRun]string{}
			for _, r := range tt.runs {
				st := fakeRun(r.busy, r.waiting)
				gr := &guardedRun{st: st, baseline: r.baseline, budget: r.budget}
				g.runs[st] = gr
				names[gr] = r.name
			}
			got := names[g.busiestOver(tt.heap)]
			if got != tt.want {
				t.Errorf("blamed %q, want %q", got, tt.want)
			}
		})
	}
}

func TestGuardWatch(t *testing.T) {
	// active set: no sampling goroutine starts, so the fields are ours.
	g := &memGuard{runs: map[*runState]*guardedRun{}, active: true}
	a, b := &runState{}, &runState{}
	doneA := g.watch(a, 32<<20)
	doneB := g.watch(b, 64<<20)
	if len(g.runs) != 2 || g.runs[a].budget != 32<<20 || g.runs[b].budget != 64<<20 {
		t.Fatalf("runs = %+v", g.runs)
	}
	// The end of a run stopped for memory makes the others start afresh.
	g.stopping = g.runs[a]
	doneA()
	if len(g.runs) != 1 || g.stopping != nil || !g.remeasure {
		t.Errorf("after the stopped run ended: %d runs, stopping %v, remeasure %v", len(g.runs), g.stopping, g.remeasure)
	}
	// The end of any other run does not.
	g.remeasure = false
	doneB()
	if len(g.runs) != 0 || g.remeasure {
		t.Errorf("after another run ended: %d runs, remeasure %v", len(g.runs), g.remeasure)
	}
}

func TestGuardStopsWhenIdle(t *testing.T) {
	g := &memGuard{runs: map[*runState]*guardedRun{}}
	done := g.watch(&runState{}, 1<<30)
	g.mu.Lock()
	started := g.active
	g.mu.Unlock()
	if !started {
		t.Fatal("watching a run did not start the guard")
	}
	done()
	eventually(t, "the guard to stop sampling with no runs", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.active
	})
}
