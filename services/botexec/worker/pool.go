package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// Config sizes a pool.
type Config struct {
	// Workers is how many worker processes run bots (at least 1).
	Workers int
	// MemoryBytes is each worker's address-space budget: a worker that
	// needs more ends, failing the runs it held.
	MemoryBytes int64
	Log         *slog.Logger
}

// DefaultMemoryBytes is a worker's address-space budget when none is set.
const DefaultMemoryBytes = 2 << 30

// Pool runs bots in worker processes. A run goes to the live worker with
// the fewest runs; a worker that ended is started again for the next one.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	slots  []*slot
	ids    atomic.Uint64
	closed atomic.Bool
}

// slot holds one worker process, started on first use and again after it
// ends.
type slot struct {
	mu   sync.Mutex
	proc *proc
	// lastStart spaces out restarts of a worker that keeps ending.
	lastStart time.Time
}

// Grace periods the parent allows a worker beyond a run's own limits.
const (
	// killGrace: past a run's timeout, the sandbox interrupts the bot and
	// abandons a built-in that ignores it after a second; a worker that has
	// not answered by then is stuck, and is killed.
	killGrace = 3 * time.Second
	// cancelGrace: how long a cancelled run may take to stop.
	cancelGrace = 2 * time.Second
	// startTimeout bounds a worker's start.
	startTimeout = 10 * time.Second
	// compileTimeout bounds transpiling and compiling one program.
	compileTimeout = 30 * time.Second
	// restartGap is the least time between two starts of one slot's
	// worker, so that code that kills every worker it reaches cannot keep
	// the machine busy starting processes.
	restartGap = 250 * time.Millisecond
)

// New starts a pool of workers. It fails when this process is itself a
// worker (a binary whose main does not call MainIfWorker), rather than start
// workers of workers.
func New(cfg Config) (*Pool, error) {
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = DefaultMemoryBytes
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if os.Getenv(envWorker) != "" {
		return nil, errors.New("bot worker: this process was started as a worker but its main did not call worker.MainIfWorker")
	}
	p := &Pool{cfg: cfg, log: cfg.Log.With("component", "bot-workers")}
	for i := 0; i < cfg.Workers; i++ {
		p.slots = append(p.slots, &slot{})
	}
	// Start them now: the first run should not wait for a process to start,
	// and a binary that cannot start workers should fail at once.
	for i, s := range p.slots {
		if _, err := p.live(s, i); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close ends every worker.
func (p *Pool) Close() {
	p.closed.Store(true)
	for _, s := range p.slots {
		s.mu.Lock()
		if s.proc != nil {
			s.proc.stop()
		}
		s.mu.Unlock()
	}
}

// live returns the slot's running worker, starting one if needed.
func (p *Pool) live(s *slot, i int) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.ended() {
		return s.proc, nil
	}
	if p.closed.Load() {
		return nil, errors.New("bot workers are stopped")
	}
	if wait := restartGap - time.Since(s.lastStart); wait > 0 {
		time.Sleep(wait)
	}
	s.lastStart = time.Now()
	pr, err := start(p, i)
	if err != nil {
		return nil, err
	}
	s.proc = pr
	pr.serving.Store(true)
	if pr.ended() { // it ended before it was serving: nothing replaced it
		p.replace(i)
	}
	return pr, nil
}

// current is the slot's worker if it is running and takes runs; nil
// otherwise (being replaced, or retired).
func (s *slot) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.ended() || s.proc.retired.Load() {
		return nil
	}
	return s.proc
}

// replace starts a new worker in a slot whose worker ended, in the
// background: runs go to the other workers meanwhile.
func (p *Pool) replace(i int) {
	if p.closed.Load() {
		return
	}
	go func() {
		if _, err := p.live(p.slots[i], i); err != nil {
			p.log.Error("bot worker not replaced", "slot", i, "err", err)
		}
	}()
}

// pick is the running worker with the fewest runs. Only when none runs
// (all ended at once) does the caller wait for one to start.
func (p *Pool) pick() (*proc, error) {
	var best *proc
	for _, s := range p.slots {
		if pr := s.current(); pr != nil && (best == nil || pr.active.Load() < best.active.Load()) {
			best = pr
		}
	}
	if best != nil {
		return best, nil
	}
	var firstErr error
	for i, s := range p.slots {
		pr, err := p.live(s, i)
		if err == nil && !pr.retired.Load() {
			return pr, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = errors.New("every bot worker is being replaced")
	}
	p.log.Error("no bot worker", "err", firstErr)
	return nil, fhir.Busy("No bot worker is available, try again")
}

// Job is one bot run.
type Job struct {
	// Key names the compiled program in a worker's cache (the Binary's
	// version); Name is its file name in errors and stack traces.
	Key, Name string
	// Code gives the program's source when a worker does not have it.
	Code  func() (string, error)
	Event sandbox.Event
	// Input is event.input's source: text, JSON text or ER7 text, by kind.
	Input     []byte
	InputKind string
	Limits    sandbox.Limits
	// Host makes the bot's medplum calls.
	Host sandbox.Host
}

// The kinds of Job.Input.
const (
	InputUndefined = inputUndefined
	InputText      = inputText
	InputJSON      = inputJSON
	InputHL7       = inputHL7
)

// Run runs a job in a worker and returns its result. A bot's failure,
// including one that ended its worker, is in Result.Err; the error return
// is for a run that could not start (a *fhir.Error: bad input, no worker).
func (p *Pool) Run(ctx context.Context, j *Job) (*sandbox.Result, error) {
	pr, err := p.pick()
	if err != nil {
		return nil, err
	}
	return pr.run(ctx, j)
}

// Compile transpiles (TypeScript, ES modules) and compiles code in a
// worker, keeping the program there under key, and returns the
// JavaScript. A syntax error is a 400 *fhir.Error; code whose compiling
// ends the worker (nesting too deep for the parser, say) is a 400 too.
func (p *Pool) Compile(ctx context.Context, name, key, code, filename string) (string, error) {
	pr, err := p.pick()
	if err != nil {
		return "", err
	}
	return pr.compile(ctx, name, key, code, filename)
}

func (p *Pool) budget() string { return strconv.FormatInt(p.cfg.MemoryBytes, 10) }

// crashed is the result of a run whose worker ended under it.
func crashed(why string) *sandbox.Result {
	return &sandbox.Result{Err: &sandbox.BotError{
		Message: "Bot run ended: its worker process stopped (" + why + ")",
		Limit:   sandbox.LimitWorker,
	}}
}

func errorf(format string, args ...any) error { return fmt.Errorf("bot worker: "+format, args...) }
