package botexec

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// slots makes a project bound of max whose runs wait at most wait.
func slots(max int, wait time.Duration) *projectSlots {
	p := newProjectSlots(max)
	p.wait = wait
	return p
}

// take acquires a slot that must be free.
func take(t *testing.T, p *projectSlots, project string) func() {
	t.Helper()
	release, err := p.acquire(context.Background(), project, false)
	if err != nil {
		t.Fatalf("%s: %v", project, err)
	}
	return release
}

// wantBusy fails unless err is the 429 of a project at its bound.
func wantBusy(t *testing.T, release func(), err error) {
	t.Helper()
	if release != nil {
		t.Fatal("a release for a refused run")
	}
	fe := wantError(t, err, 429, "Too Many Requests")
	i := fe.Outcome.Issue[0]
	if fe.Outcome.ID != "too-many-requests" || i.Code != "throttled" || i.Diagnostics != "Too many bots are running in this project; try again" || fe.Header["Retry-After"] != "1" {
		t.Fatalf("%+v %v", fe.Outcome, fe.Header)
	}
}

// refs is how many runs hold or wait for the project's slots; 0 when it
// has no state.
func refs(p *projectSlots, project string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps := p.projects[project]; ps != nil {
		return ps.refs
	}
	return 0
}

// waitFor waits until the project has n runs holding or waiting.
func waitFor(t *testing.T, p *projectSlots, project string, n int) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("%s to have %d runs holding or waiting", project, n), func() bool { return refs(p, project) == n })
}

func TestNewProjectSlots(t *testing.T) {
	cases := []struct{ max, want int }{{-1, defaultProjectConcurrency}, {0, defaultProjectConcurrency}, {1, 1}, {3, 3}, {100, 100}}
	for _, tc := range cases {
		p := newProjectSlots(tc.max)
		if p.max != tc.want || p.wait != slotWait || p.projects == nil {
			t.Errorf("newProjectSlots(%d): max %d, wait %v", tc.max, p.max, p.wait)
		}
	}
}

// Up to the bound runs start at once; past it a run that may not wait is
// refused at once; a slot given back is taken again.
func TestProjectSlotsBound(t *testing.T) {
	for _, max := range []int{1, 3, defaultProjectConcurrency} {
		p := slots(max, time.Hour)
		var held []func()
		for range max {
			held = append(held, take(t, p, "p1"))
		}
		release, err := p.acquire(context.Background(), "p1", false)
		wantBusy(t, release, err)
		if refs(p, "p1") != max {
			t.Fatalf("max %d: a refused run kept its place: %d", max, refs(p, "p1"))
		}
		held[0]()
		held[0] = take(t, p, "p1")
		for _, release := range held {
			release()
		}
	}
}

// One project at its bound takes nothing from another.
func TestProjectSlotsPerProject(t *testing.T) {
	p := slots(2, time.Hour)
	a1, a2 := take(t, p, "busy"), take(t, p, "busy")
	release, err := p.acquire(context.Background(), "busy", false)
	wantBusy(t, release, err)
	b1, b2 := take(t, p, "calm"), take(t, p, "calm")
	release, err = p.acquire(context.Background(), "calm", false)
	wantBusy(t, release, err)
	for _, r := range []func(){a1, a2, b1, b2} {
		r()
	}
}

// A project holds state only while runs hold or wait for its slots.
func TestProjectSlotsForgetIdleProjects(t *testing.T) {
	p := slots(2, time.Millisecond)
	r1 := take(t, p, "p1")
	r2 := take(t, p, "p2")
	if len(p.projects) != 2 || refs(p, "p1") != 1 {
		t.Fatalf("%d projects", len(p.projects))
	}
	r1()
	if _, ok := p.projects["p1"]; ok || len(p.projects) != 1 {
		t.Fatal("an idle project kept its state")
	}
	// A refused run leaves no state behind either.
	r3 := take(t, p, "p2")
	release, err := p.acquire(context.Background(), "p2", true)
	wantBusy(t, release, err)
	r2()
	r3()
	if len(p.projects) != 0 {
		t.Fatalf("%d projects left", len(p.projects))
	}
	release, err = p.acquire(context.Background(), "p3", false)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if len(p.projects) != 0 {
		t.Fatalf("%d projects left", len(p.projects))
	}
}

// A run that may wait, and finds no slot freed in time, is refused.
func TestProjectSlotsWaitEnds(t *testing.T) {
	p := slots(1, time.Millisecond)
	held := take(t, p, "p1")
	defer held()
	release, err := p.acquire(context.Background(), "p1", true)
	wantBusy(t, release, err)
	if refs(p, "p1") != 1 {
		t.Fatalf("%d runs", refs(p, "p1"))
	}
}

// A waiting run takes the slot given back.
func TestProjectSlotsWaitTakesFreedSlot(t *testing.T) {
	p := slots(1, time.Hour)
	held := take(t, p, "p1")
	type result struct {
		release func()
		err     error
	}
	done := make(chan result)
	go func() {
		release, err := p.acquire(context.Background(), "p1", true)
		done <- result{release, err}
	}()
	waitFor(t, p, "p1", 2) // it is waiting
	held()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if refs(p, "p1") != 1 {
		t.Fatalf("%d runs", refs(p, "p1"))
	}
	res.release()
	if len(p.projects) != 0 {
		t.Fatal("state left")
	}
}

// A waiting run whose request ends gives up its place.
func TestProjectSlotsWaitCancelled(t *testing.T) {
	p := slots(1, time.Hour)
	held := take(t, p, "p1")
	defer held()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error)
	go func() {
		release, err := p.acquire(ctx, "p1", true)
		if release != nil {
			release()
		}
		errs <- err
	}()
	waitFor(t, p, "p1", 2)
	cancel()
	wantBusy(t, nil, <-errs)
	if refs(p, "p1") != 1 {
		t.Fatalf("%d runs", refs(p, "p1"))
	}
}

// A request already ended does not wait for a slot, and still takes a free one.
func TestProjectSlotsEndedRequest(t *testing.T) {
	p := slots(1, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release, err := p.acquire(ctx, "p1", true)
	if err != nil {
		t.Fatalf("a free slot refused: %v", err)
	}
	release2, err := p.acquire(ctx, "p1", true)
	wantBusy(t, release2, err)
	release()
}
