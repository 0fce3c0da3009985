package sandbox

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// memGuard enforces Limits.MemoryBytes. goja allocates from the ordinary Go
// heap and offers no per-runtime accounting, so the guard works from the
// process-wide heap:
//
//   - at the start of a run it records the live heap (as of the last GC) as
//     the run's baseline;
//   - while any run is active it samples the heap every guardInterval; a run
//     is suspect when the heap exceeds its baseline by more than its budget;
//   - a suspect is only stopped once the live heap (measured by a GC, forced
//     if need be, at most every gcConfirmInterval) confirms the growth, so
//     garbage a bot has already dropped does not count against it;
//   - when several runs are suspect it stops the most recently started one
//     (whose window is the narrowest that still contains the growth), then
//     waits for that run to end and the heap to be measured again before
//     judging anyone else.
//
// What this cannot do, honestly: it cannot tell which of several concurrent
// runs allocated, so a long run overlapping a hog, or overlapping growth
// elsewhere in the process, can be stopped instead of (or before) the hog;
// it acts between samples, so a run can overshoot its budget by what it
// allocates in a few milliseconds; and a single native call (one huge
// JSON.parse, say) allocates before any interrupt can land — which is why
// the prelude also caps the bulk allocators it can (String repeat/pad,
// Array fill). Memory is freed when the stopped run's runtime is collected.
type memGuard struct {
	mu        sync.Mutex
	runs      map[*runState]*guardedRun
	seq       int64
	active    bool
	stopping  *guardedRun // a run stopped for memory that has not ended yet
	remeasure bool        // a stopped run ended: measure afresh before judging
	lastGC    time.Time
}

type guardedRun struct {
	st       *runState
	baseline uint64
	budget   uint64
	seq      int64
}

const (
	guardInterval     = 5 * time.Millisecond
	gcConfirmInterval = 100 * time.Millisecond
	metricHeap        = "/memory/classes/heap/objects:bytes"
	metricLive        = "/gc/heap/live:bytes"
)

var guard = &memGuard{runs: map[*runState]*guardedRun{}}

func readLive() uint64 {
	s := []metrics.Sample{{Name: metricLive}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// watch registers a run; the returned function deregisters it.
func (g *memGuard) watch(st *runState, budget int64) func() {
	r := &guardedRun{st: st, baseline: readLive(), budget: uint64(budget)}
	g.mu.Lock()
	g.seq++
	r.seq = g.seq
	g.runs[st] = r
	if !g.active {
		g.active = true
		go g.loop()
	}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.runs, st)
		if g.stopping == r {
			g.stopping = nil
			g.remeasure = true
		}
		g.mu.Unlock()
	}
}

func (g *memGuard) loop() {
	t := time.NewTicker(guardInterval)
	defer t.Stop()
	samples := []metrics.Sample{{Name: metricHeap}, {Name: metricLive}}
	for range t.C {
		g.mu.Lock()
		if len(g.runs) == 0 {
			g.active = false
			g.mu.Unlock()
			return
		}
		if g.stopping != nil {
			g.mu.Unlock()
			continue
		}
		metrics.Read(samples)
		heapBytes, live := samples[0].Value.Uint64(), samples[1].Value.Uint64()
		suspect := g.youngestOver(heapBytes)
		victim := g.youngestOver(live)
		needGC := suspect != nil && victim == nil && time.Since(g.lastGC) >= gcConfirmInterval
		if g.remeasure {
			needGC, victim = suspect != nil, nil
		}
		g.mu.Unlock()

		if needGC {
			runtime.GC()
			metrics.Read(samples)
			g.mu.Lock()
			g.lastGC = time.Now()
			g.remeasure = false
			victim = g.youngestOver(samples[1].Value.Uint64())
			g.mu.Unlock()
		}
		if victim != nil {
			g.mu.Lock()
			if _, still := g.runs[victim.st]; still {
				g.stopping = victim
			}
			g.mu.Unlock()
			victim.st.stop(&BotError{
				Message: fmt.Sprintf("Bot exceeded its memory limit of %d MiB", victim.budget>>20),
				Limit:   LimitMemory,
			})
		}
	}
}

// youngestOver is the most recently started run whose growth over its
// baseline, measured by heap, exceeds its budget; g.mu is held.
func (g *memGuard) youngestOver(heap uint64) *guardedRun {
	var found *guardedRun
	for _, r := range g.runs {
		if heap > r.baseline && heap-r.baseline > r.budget && (found == nil || r.seq > found.seq) {
			found = r
		}
	}
	return found
}
