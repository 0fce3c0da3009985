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
//   - a run can only allocate while its goroutine is executing JavaScript,
//     so a suspect that is waiting (on the FHIR API, say), or has been busy
//     for less than minBusy in all, is not blamed now: if it did allocate
//     before it waited, it is blamed once it runs again;
//   - among the remaining suspects it stops the one that has been busy the
//     longest, then waits for that run to end; the others then start a new
//     window from the live heap measured after it, so that what the stopped
//     run left for the collector is not counted against them.
//
// What this cannot do, honestly: it cannot see which goroutine allocated, so
// when two runs are both computing while the heap grows past both budgets,
// the busier one is stopped even if the other allocated, and growth
// elsewhere in the process is blamed on whichever busy run overlaps it; it
// acts between samples, so a run can overshoot its budget by what it
// allocates in a few milliseconds; and a single built-in call (one huge
// JSON.parse, say) allocates before any interrupt can land — which is why
// the prelude also caps the bulk allocators it can. Memory is freed when the
// stopped run's runtime is collected.
type memGuard struct {
	mu        sync.Mutex
	runs      map[*runState]*guardedRun
	active    bool
	stopping  *guardedRun // a run stopped for memory that has not ended yet
	remeasure bool        // a stopped run ended: measure afresh before judging
	lastGC    time.Time
}

type guardedRun struct {
	st       *runState
	baseline uint64
	budget   uint64
}

const (
	minBusy           = 2 * time.Millisecond
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
		suspect := g.busiestOver(heapBytes)
		victim := g.busiestOver(live)
		needGC := suspect != nil && victim == nil && time.Since(g.lastGC) >= gcConfirmInterval
		rebase := g.remeasure
		if rebase {
			needGC, victim = true, nil
		}
		g.mu.Unlock()

		if rebase {
			// A run stopped for memory has ended: measure the live heap
			// and start every other run's window there. (Judging them
			// against it at once blamed a bot that had waited on the FHIR
			// API all along, when the stopped run's heap was not yet free.)
			runtime.GC()
			metrics.Read(samples)
			g.mu.Lock()
			g.lastGC = time.Now()
			g.remeasure = false
			live := samples[1].Value.Uint64()
			for _, r := range g.runs {
				r.baseline = max(r.baseline, live)
			}
			g.mu.Unlock()
			continue
		}
		if needGC {
			runtime.GC()
			metrics.Read(samples)
			g.mu.Lock()
			g.lastGC = time.Now()
			victim = g.busiestOver(samples[1].Value.Uint64())
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

// busiestOver is the run that has executed JavaScript the longest among
// those whose growth over their baseline, measured by heap, exceeds their
// budget; g.mu is held.
func (g *memGuard) busiestOver(heap uint64) *guardedRun {
	now := time.Now().UnixNano()
	var found *guardedRun
	var foundBusy time.Duration
	for _, r := range g.runs {
		if heap <= r.baseline || heap-r.baseline <= r.budget {
			continue
		}
		if r.st.busySince.Load() == 0 {
			continue // waiting: not allocating now
		}
		busy := r.st.busyTime(now)
		if busy < minBusy {
			continue
		}
		if found == nil || busy > foundBusy {
			found, foundBusy = r, busy
		}
	}
	return found
}
