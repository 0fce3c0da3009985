package botexec

import (
	"context"
	"sync"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// projectSlots bounds how many bots each project runs at once on this
// instance, so that one tenant's spinning bots cannot take every worker:
// past the bound a run waits its turn (at most slotWait), and is then
// refused with 429. Each project has its own queue; an idle project holds
// no state.
type projectSlots struct {
	max int
	// wait is the longest a run waits for its turn (slotWait).
	wait     time.Duration
	mu       sync.Mutex
	projects map[string]*projectSlot
}

type projectSlot struct {
	sem  chan struct{}
	refs int // runs holding or waiting for a slot
}

// slotWait is the longest a run waits for its project's turn.
const slotWait = 10 * time.Second

// defaultProjectConcurrency: enough for a project's bots to keep two cores
// busy while others wait on the API, few enough that eight tenants' worth
// cannot hold the workers.
const defaultProjectConcurrency = 8

func newProjectSlots(max int) *projectSlots {
	if max <= 0 {
		max = defaultProjectConcurrency
	}
	return &projectSlots{max: max, wait: slotWait, projects: map[string]*projectSlot{}}
}

// acquire takes one of the project's slots, waiting for one when wait is
// set, and returns the function that gives it back.
func (p *projectSlots) acquire(ctx context.Context, project string, wait bool) (func(), error) {
	p.mu.Lock()
	ps := p.projects[project]
	if ps == nil {
		ps = &projectSlot{sem: make(chan struct{}, p.max)}
		p.projects[project] = ps
	}
	ps.refs++
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		if ps.refs--; ps.refs == 0 {
			delete(p.projects, project)
		}
		p.mu.Unlock()
	}
	select {
	case ps.sem <- struct{}{}:
		return func() { <-ps.sem; done() }, nil
	default:
	}
	if wait {
		t := time.NewTimer(p.wait)
		defer t.Stop()
		select {
		case ps.sem <- struct{}{}:
			return func() { <-ps.sem; done() }, nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	done()
	return nil, projectBusy()
}

// projectBusy is the 429 for a run that found no slot in its project.
func projectBusy() *fhir.Error {
	e := fhir.TooManyRequests()
	e.Outcome.Issue[0].Diagnostics = "Too many bots are running in this project; try again"
	e.Header = map[string]string{"Retry-After": "1"}
	return e
}
