package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// proc is one worker process, seen from the parent.
type proc struct {
	pool   *Pool
	slot   int
	cmd    *exec.Cmd
	c      *conn
	toProc io.Closer

	mu      sync.Mutex
	pending map[uint64]*pending
	// known are the program keys this worker has been sent (its own cache
	// is as large; a key it dropped is asked for again).
	known *lru.Cache[string, struct{}]

	active  atomic.Int32 // runs in progress
	serving atomic.Bool  // started and given to its slot: replaced when it ends
	retired atomic.Bool  // takes no new runs; stopped once idle
	done    chan struct{}
	why     atomic.Pointer[string] // why it ended
	stderr  tail
}

// pending is a run or compile waiting for its answer.
type pending struct {
	answer chan frame
	ctx    context.Context
	host   sandbox.Host
	resend func()
}

type frame struct {
	h       *header
	payload []byte
}

// workerGOGC is a worker's garbage-collector target. Every run builds a
// fresh runtime, some 190 KB of garbage over a live heap of a few MB, so at
// Go's default of 100 the collector ran every few dozen runs and took a
// fifth of a worker's CPU; its cost per run falls with GOGC (1/4 of it at
// 400). The heap stays bounded: confine's memory limit makes the collector
// work harder as the heap nears the budget, and the memory guard judges
// runs by the live heap, which GOGC does not change.
const workerGOGC = "400"

// start launches a worker and waits until it is ready.
func start(p *Pool, slot int) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, errorf("cannot find this binary: %v", err)
	}
	toChildR, toChildW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromChildR, fromChildW, err := os.Pipe()
	if err != nil {
		toChildR.Close()
		toChildW.Close()
		return nil, err
	}
	pr := &proc{pool: p, slot: slot, pending: map[uint64]*pending{}, done: make(chan struct{}), toProc: toChildW}
	pr.known, _ = lru.New[string, struct{}](programCache)
	cmd := exec.Command(exe)
	// Nothing of the parent's environment (its settings hold secrets): a
	// worker needs only to know that it is one. A fatal error prints the
	// failing goroutine only: a stack overflow's full dump runs to megabytes.
	cmd.Env = []string{envWorker + "=" + p.budget(), "GOTRACEBACK=single", "GOGC=" + workerGOGC}
	cmd.ExtraFiles = []*os.File{toChildR, fromChildW}
	cmd.Stdout = &pr.stderr
	cmd.Stderr = &pr.stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{toChildR, toChildW, fromChildR, fromChildW} {
			f.Close()
		}
		return nil, errorf("start: %v", err)
	}
	toChildR.Close()
	fromChildW.Close()
	pr.cmd = cmd
	pr.c = newConn(fromChildR, toChildW)
	go func() {
		err := cmd.Wait()
		why := "exited"
		if err != nil {
			why = err.Error()
		}
		if t := pr.stderr.last(); t != "" {
			why += ": " + t
		}
		pr.why.CompareAndSwap(nil, &why)
		fromChildR.Close()
		_ = toChildW.Close() // a second close (after stop) is harmless
		close(pr.done)
		if pr.serving.Load() {
			p.replace(slot)
		}
	}()
	ready := make(chan error, 1)
	go func() {
		h, _, err := pr.c.recv()
		if err == nil && h.T != msgReady {
			err = errorf("first message %q", h.T)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			pr.kill("did not start")
			<-pr.done
			return nil, errorf("did not start: %s", *pr.why.Load())
		}
	case <-time.After(startTimeout):
		pr.kill("did not start in time")
		return nil, errorf("did not start within %v", startTimeout)
	}
	go pr.read()
	p.log.Info("bot worker started", "slot", slot, "pid", cmd.Process.Pid)
	return pr, nil
}

func (pr *proc) ended() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// kill ends the worker at once; its runs fail with why.
func (pr *proc) kill(why string) {
	pr.why.CompareAndSwap(nil, &why)
	// No new runs: the exit is seen a moment after the signal, and a run
	// picked in between would end with this worker.
	pr.retired.Store(true)
	if pr.cmd != nil && pr.cmd.Process != nil {
		_ = pr.cmd.Process.Kill()
	}
}

// stop asks the worker to end (its input closes), then makes sure.
func (pr *proc) stop() {
	why := "stopped"
	pr.why.CompareAndSwap(nil, &why)
	_ = pr.toProc.Close()
	go func() {
		select {
		case <-pr.done:
		case <-time.After(2 * time.Second):
			pr.kill("stopped")
		}
	}()
}

// retire takes the worker out of service: it finishes its runs and ends.
func (pr *proc) retire(why string) {
	if pr.retired.Swap(true) {
		return
	}
	pr.pool.log.Warn("bot worker retired", "slot", pr.slot, "pid", pr.cmd.Process.Pid, "why", why)
	pr.why.CompareAndSwap(nil, &why)
	pr.stopIfIdle()
	// Runs end by their deadlines; the longest is 15 minutes.
	time.AfterFunc(16*time.Minute, func() { pr.kill(why) })
}

func (pr *proc) stopIfIdle() {
	if pr.retired.Load() && pr.active.Load() == 0 {
		pr.stop()
	}
}

// read dispatches the worker's messages until it ends.
func (pr *proc) read() {
	for {
		h, payload, err := pr.c.recv()
		if err != nil {
			return // the Wait goroutine marks the end
		}
		pr.mu.Lock()
		p := pr.pending[h.ID]
		pr.mu.Unlock()
		if p == nil {
			continue // answered already (a cancelled run, say)
		}
		switch h.T {
		case msgResult, msgCompiled:
			select {
			case p.answer <- frame{h, payload}:
			default: // answered already: never hold up the other runs' answers
			}
		case msgNeedCode:
			go p.resend()
		case msgHost:
			go pr.hostCall(p, h, payload)
		}
	}
}

// hostCall makes one medplum call of a bot and answers it.
func (pr *proc) hostCall(p *pending, h *header, body []byte) {
	status, ct, resp, err := p.host.Request(p.ctx, h.Method, h.Path, body, h.ContentType)
	if err != nil {
		fe := fhir.AsError(err)
		status, ct, resp = fe.Status, "application/fhir+json", fe.JSON()
	}
	if err := pr.c.send(&header{T: msgHostReply, ID: h.ID, Call: h.Call, Status: status, ContentType: ct}, resp); err != nil {
		e := fhir.TooLarge("Response too large")
		_ = pr.c.send(&header{T: msgHostReply, ID: h.ID, Call: h.Call, Status: e.Status, ContentType: "application/fhir+json"}, e.JSON())
	}
}

func (pr *proc) add(id uint64, p *pending) {
	pr.mu.Lock()
	pr.pending[id] = p
	pr.mu.Unlock()
}

func (pr *proc) remove(id uint64) {
	pr.mu.Lock()
	delete(pr.pending, id)
	pr.mu.Unlock()
}

func (pr *proc) endReason() string {
	if w := pr.why.Load(); w != nil {
		return *w
	}
	return "ended"
}

// run sends a job and waits for its result, the caller's end, or the
// worker's.
func (pr *proc) run(ctx context.Context, j *Job) (*sandbox.Result, error) {
	pr.active.Add(1)
	defer func() {
		pr.active.Add(-1)
		pr.stopIfIdle()
	}()
	id := pr.pool.ids.Add(1)
	lim := j.Limits
	if lim.Timeout <= 0 {
		lim.Timeout = sandbox.DefaultLimits.Timeout
	}
	p := &pending{answer: make(chan frame, 1), ctx: ctx, host: j.Host}
	ev := &eventHeader{Bot: j.Event.Bot, Requester: j.Event.Requester, ContentType: j.Event.ContentType,
		Secrets: j.Event.Secrets, TraceID: j.Event.TraceID, Headers: j.Event.Headers}
	send := func(withCode bool) error {
		h := &header{T: msgRun, ID: id, Key: j.Key, Name: j.Name, Event: ev, Limits: &lim, InputKind: j.InputKind}
		var code []byte
		if withCode {
			src, err := j.Code()
			if err != nil {
				return err
			}
			code = []byte(src)
			h.CodeLen = len(code)
			pr.known.Add(j.Key, struct{}{})
		}
		return pr.c.send(h, code, j.Input)
	}
	p.resend = func() {
		if err := send(true); err != nil {
			select {
			case p.answer <- frame{h: &header{T: msgResult, ID: id, Fault: faultOf(err)}}:
			default:
			}
		}
	}
	pr.add(id, p)
	defer pr.remove(id)
	if err := send(!pr.known.Contains(j.Key)); err != nil {
		return nil, err
	}
	watchdog := time.NewTimer(lim.Timeout + killGrace)
	defer watchdog.Stop()
	for {
		select {
		case f := <-p.answer:
			return pr.result(f)
		case <-pr.done:
			pr.pool.log.Warn("bot worker ended under a run", "slot", pr.slot, "bot", j.Name, "why", pr.endReason())
			return crashed(summary(pr.endReason())), nil
		case <-watchdog.C:
			pr.kill("a run outlived its deadline")
			return &sandbox.Result{Err: &sandbox.BotError{
				Message: "Bot timed out and did not stop; its worker process was stopped",
				Limit:   sandbox.LimitTimeout,
			}}, nil
		case <-ctx.Done():
			// Tell the worker; it answers with the cancelled result.
			_ = pr.c.send(&header{T: msgCancel, ID: id})
			watchdog.Reset(cancelGrace)
			ctx = context.Background()
		}
	}
}

// result reads a run's answer.
func (pr *proc) result(f frame) (*sandbox.Result, error) {
	h := f.h
	if h.Fault != nil {
		return nil, h.Fault.err()
	}
	res := h.Result
	if res == nil {
		return nil, errorf("result without a result")
	}
	if h.TextLen > len(f.payload) {
		return nil, errorf("result text of %d bytes in a payload of %d", h.TextLen, len(f.payload))
	}
	res.Text = string(f.payload[:h.TextLen])
	res.JSON = nil // the header's is null: the JSON, if any, is the payload's
	if js := f.payload[h.TextLen:]; len(js) > 0 {
		res.JSON = js
	}
	if h.Stuck {
		// A built-in that ignored its interrupt is still running in the
		// worker: take it out of service.
		pr.retire("a run was stuck in a built-in function")
	}
	return res, nil
}

// compile sends code to be transpiled and compiled.
func (pr *proc) compile(ctx context.Context, name, key, code, filename string) (string, error) {
	pr.active.Add(1)
	defer func() {
		pr.active.Add(-1)
		pr.stopIfIdle()
	}()
	id := pr.pool.ids.Add(1)
	p := &pending{answer: make(chan frame, 1), ctx: ctx}
	pr.add(id, p)
	defer pr.remove(id)
	if err := pr.c.send(&header{T: msgCompile, ID: id, Name: name, Key: key, Filename: filename}, []byte(code)); err != nil {
		return "", err
	}
	timer := time.NewTimer(compileTimeout)
	defer timer.Stop()
	select {
	case f := <-p.answer:
		if f.h.Fault != nil {
			return "", f.h.Fault.err()
		}
		if key != "" {
			pr.known.Add(key, struct{}{})
		}
		return string(f.payload), nil
	case <-pr.done:
		pr.pool.log.Warn("bot worker ended while compiling", "slot", pr.slot, "bot", name, "why", pr.endReason())
		return "", fhir.BadRequest("The code could not be compiled: the compiler stopped (" + summary(pr.endReason()) + "); is it nested too deeply?")
	case <-timer.C:
		pr.kill("compiling took too long")
		return "", fhir.BadRequest("The code could not be compiled in " + compileTimeout.String())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// summary is the part of a worker's end a caller may see: the kind of
// fatal error, without addresses or stacks.
func summary(why string) string {
	switch {
	case strings.Contains(why, "out of memory"), strings.Contains(why, "cannot allocate memory"):
		return "out of memory"
	case strings.Contains(why, "stack overflow"), strings.Contains(why, "stack exceeds"):
		return "stack overflow"
	case strings.Contains(why, "outlived its deadline"):
		return "did not stop at its deadline"
	case strings.Contains(why, "killed"):
		return "killed"
	}
	return "fatal error"
}

// tail keeps what a worker writes to stdout and stderr: the first fatal
// error it reports (why it ended), and the last few kilobytes for the log.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	line  []byte // the line being written
	fatal string
}

const tailSize = 4 << 10

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailSize {
		t.buf = t.buf[len(t.buf)-tailSize:]
	}
	for _, c := range b {
		if c != '\n' {
			if len(t.line) < 512 {
				t.line = append(t.line, c)
			}
			continue
		}
		if l := string(t.line); t.fatal == "" && (strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "runtime: ") && strings.Contains(l, "exceeds")) {
			t.fatal = l
		}
		t.line = t.line[:0]
	}
	return len(b), nil
}

// last is the first fatal error the worker reported, or the last line it
// wrote.
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fatal != "" {
		return t.fatal
	}
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
