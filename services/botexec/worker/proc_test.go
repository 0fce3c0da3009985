package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// fakeWorker is a proc whose worker is this test: it reads what the proc
// sends and answers by hand.
type fakeWorker struct {
	*peer
	pr *proc
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

func newFakeWorker(t *testing.T) *fakeWorker {
	parentEnd, workerEnd, closeParent := pipes(t)
	pool := &Pool{cfg: Config{Workers: 1}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	pr := &proc{pool: pool, pending: map[uint64]*pending{}, done: make(chan struct{}), c: parentEnd, toProc: closerFunc(closeParent)}
	pr.known, _ = lru.New[string, struct{}](programCache)
	go pr.read()
	return &fakeWorker{peer: reader(t, workerEnd), pr: pr}
}

// end makes the worker end as its Wait goroutine would record it.
func (w *fakeWorker) end(why string) {
	w.pr.why.CompareAndSwap(nil, &why)
	close(w.pr.done)
}

// answer sends a run's result: text and JSON in the payload, as a worker does.
func (w *fakeWorker) answer(id uint64, res sandbox.Result) {
	w.t.Helper()
	text, js := []byte(res.Text), []byte(res.JSON)
	res.Text, res.JSON = "", nil
	w.send(&header{T: msgResult, ID: id, Result: &res, TextLen: len(text)}, text, js)
}

// outcome is what a run or compile in the background came to.
type outcome struct {
	res *sandbox.Result
	js  string
	err error
}

func (w *fakeWorker) run(ctx context.Context, j *Job) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		res, err := w.pr.run(ctx, j)
		out <- outcome{res: res, err: err}
	}()
	return out
}

func (w *fakeWorker) compile(ctx context.Context, key, code string) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		js, err := w.pr.compile(ctx, "Bot/c", key, code, "bot.ts")
		out <- outcome{js: js, err: err}
	}()
	return out
}

func wait(t *testing.T, out <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
	}
	return outcome{}
}

// countedJob is a job whose Code counts how often it is asked for.
func countedJob(key string, codeErr error) (*Job, *atomic.Int32) {
	var n atomic.Int32
	return &Job{
		Key: key, Name: "Bot/" + key,
		Code: func() (string, error) {
			n.Add(1)
			if codeErr != nil {
				return "", codeErr
			}
			return echo, nil
		},
		Event:  sandbox.Event{Bot: map[string]any{"reference": "Bot/1"}, ContentType: "text/plain", TraceID: "tr"},
		Input:  []byte("in"),
		Limits: sandbox.Limits{MaxOutputBytes: 99},
		Host:   noHost{},
	}, &n
}

func TestProcSendsCodeOnlyWhenNeeded(t *testing.T) {
	w := newFakeWorker(t)
	j, codeCalls := countedJob("k", nil)
	out := w.run(context.Background(), j)
	f := w.next()
	h := f.h
	if h.T != msgRun || h.Key != "k" || h.Name != "Bot/k" || h.CodeLen != len(echo) || string(f.payload) != echo+"in" ||
		h.Event == nil || h.Event.Bot["reference"] != "Bot/1" || h.Event.ContentType != "text/plain" || h.Event.TraceID != "tr" || h.InputKind != "" {
		t.Fatalf("first run frame %+v %q", h, f.payload)
	}
	// A run without a timeout is given the default, which the parent's
	// watchdog counts from too.
	if h.Limits == nil || h.Limits.Timeout != sandbox.DefaultLimits.Timeout || h.Limits.MaxOutputBytes != 99 {
		t.Errorf("limits %+v", h.Limits)
	}
	w.answer(h.ID, sandbox.Result{Kind: sandbox.KindString, Text: "in", JSON: []byte(`"in"`)})
	if o := wait(t, out); o.err != nil || o.res.Text != "in" {
		t.Fatalf("%+v", o)
	}

	// The worker has it: the second run goes without code...
	out = w.run(context.Background(), j)
	f = w.next()
	if f.h.CodeLen != 0 || string(f.payload) != "in" || f.h.ID == h.ID {
		t.Fatalf("second run frame %+v %q", f.h, f.payload)
	}
	// ...unless the worker dropped it: then it is sent again, under the
	// same run.
	w.send(&header{T: msgNeedCode, ID: f.h.ID})
	again := w.next()
	if again.h.T != msgRun || again.h.ID != f.h.ID || again.h.CodeLen != len(echo) || string(again.payload) != echo+"in" {
		t.Fatalf("resent run frame %+v %q", again.h, again.payload)
	}
	w.answer(f.h.ID, sandbox.Result{Kind: sandbox.KindString, Text: "in"})
	if o := wait(t, out); o.err != nil || o.res.Text != "in" {
		t.Fatalf("%+v", o)
	}
	if n := codeCalls.Load(); n != 2 {
		t.Errorf("Code called %d times, want 2", n)
	}
}

func TestProcCodeUnavailable(t *testing.T) {
	w := newFakeWorker(t)
	gone := errors.New("binary gone")
	t.Run("before the first send", func(t *testing.T) {
		w.t = t
		j, _ := countedJob("first", gone)
		o := wait(t, w.run(context.Background(), j))
		if o.res != nil || !errors.Is(o.err, gone) {
			t.Errorf("got %+v", o)
		}
	})
	t.Run("when the worker asks for it", func(t *testing.T) {
		w.t = t
		ok, _ := countedJob("later", nil)
		out := w.run(context.Background(), ok)
		w.answer(w.next().h.ID, sandbox.Result{})
		wait(t, out)
		j, _ := countedJob("later", gone)
		out = w.run(context.Background(), j)
		w.send(&header{T: msgNeedCode, ID: w.next().h.ID})
		o := wait(t, out)
		if o.res != nil || o.err == nil || o.err.Error() != "bot worker: binary gone" {
			t.Errorf("got %+v", o)
		}
	})
	w.pr.mu.Lock()
	defer w.pr.mu.Unlock()
	if len(w.pr.pending) != 0 {
		t.Errorf("%d runs still pending", len(w.pr.pending))
	}
}

func TestProcReadsResults(t *testing.T) {
	w := newFakeWorker(t)
	tests := []struct {
		name    string
		h       header
		payload string
		check   func(*sandbox.Result, error) bool
	}{
		{"text then JSON", header{Result: &sandbox.Result{Kind: sandbox.KindString, Log: "l\n"}, TextLen: 2}, `hi"hi"`,
			func(r *sandbox.Result, err error) bool {
				return err == nil && r.Kind == sandbox.KindString && r.Text == "hi" && string(r.JSON) == `"hi"` && r.Log == "l\n"
			}},
		{"text alone has no JSON", header{Result: &sandbox.Result{Kind: sandbox.KindHL7}, TextLen: 5}, "MSH|A",
			func(r *sandbox.Result, err error) bool { return err == nil && r.Text == "MSH|A" && r.JSON == nil }},
		{"undefined has neither", header{Result: &sandbox.Result{Kind: sandbox.KindUndefined}}, "",
			func(r *sandbox.Result, err error) bool { return err == nil && r.Text == "" && r.JSON == nil }},
		{"the bot's failure", header{Result: &sandbox.Result{Err: &sandbox.BotError{Message: "boom", Limit: sandbox.LimitMemory}}}, "",
			func(r *sandbox.Result, err error) bool {
				return err == nil && r.Err != nil && r.Err.Message == "boom" && r.Err.Limit == sandbox.LimitMemory
			}},
		{"a fault with an outcome", header{Fault: faultOf(fhir.TooLarge("too big"))}, "",
			func(r *sandbox.Result, err error) bool {
				var fe *fhir.Error
				return r == nil && errors.As(err, &fe) && fe.Status == 413 && fe.Message() == "too big"
			}},
		{"a fault without", header{Fault: &fault{Status: 500, Message: "sandbox: panic"}}, "",
			func(r *sandbox.Result, err error) bool {
				return r == nil && err != nil && err.Error() == "bot worker: sandbox: panic"
			}},
		{"no result", header{}, "",
			func(r *sandbox.Result, err error) bool {
				return r == nil && err != nil && err.Error() == "bot worker: result without a result"
			}},
		{"text longer than the payload", header{Result: &sandbox.Result{}, TextLen: 10}, "abc",
			func(r *sandbox.Result, err error) bool {
				return r == nil && err != nil && err.Error() == "bot worker: result text of 10 bytes in a payload of 3"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.t = t
			j, _ := countedJob("results", nil)
			out := w.run(context.Background(), j)
			h := tt.h
			h.T, h.ID = msgResult, w.next().h.ID
			w.send(&h, []byte(tt.payload))
			o := wait(t, out)
			if !tt.check(o.res, o.err) {
				t.Errorf("got %+v (err %v)", o.res, o.err)
				if o.res != nil {
					t.Logf("text %q json %q bot error %+v", o.res.Text, o.res.JSON, o.res.Err)
				}
			}
		})
	}
}

func TestProcWorkerEndsUnderARun(t *testing.T) {
	tests := []struct{ why, want string }{
		{"exit status 2: fatal error: runtime: out of memory", "Bot run ended: its worker process stopped (out of memory)"},
		{"signal: killed", "Bot run ended: its worker process stopped (killed)"},
		{"", "Bot run ended: its worker process stopped (fatal error)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			w := newFakeWorker(t)
			j, _ := countedJob("k", nil)
			out := w.run(context.Background(), j)
			w.next()
			if tt.why == "" {
				close(w.pr.done)
			} else {
				w.end(tt.why)
			}
			o := wait(t, out)
			if o.err != nil || o.res.Err == nil || o.res.Err.Limit != sandbox.LimitWorker || o.res.Err.Message != tt.want {
				t.Errorf("got %+v %v", o.res, o.err)
			}
		})
	}
}

func TestProcCancel(t *testing.T) {
	w := newFakeWorker(t)
	ctx, cancel := context.WithCancel(context.Background())
	j, _ := countedJob("k", nil)
	out := w.run(ctx, j)
	id := w.next().h.ID
	cancel()
	f := w.next()
	if f.h.T != msgCancel || f.h.ID != id {
		t.Fatalf("got %+v, want a cancel of run %d", f.h, id)
	}
	w.answer(id, sandbox.Result{Err: &sandbox.BotError{Message: "Bot execution cancelled: context canceled", Limit: sandbox.LimitCancelled}})
	if o := wait(t, out); o.err != nil || o.res.Err == nil || o.res.Err.Limit != sandbox.LimitCancelled {
		t.Errorf("got %+v %v", o.res, o.err)
	}
}

func TestProcIgnoresStrayFrames(t *testing.T) {
	w := newFakeWorker(t)
	j, _ := countedJob("k", nil)
	out := w.run(context.Background(), j)
	id := w.next().h.ID
	// Frames for runs it does not know, and a second answer to one it
	// does, neither reach a run nor hold up the reader.
	w.answer(id+100, sandbox.Result{Text: "stray"})
	w.send(&header{T: msgHost, ID: id + 100, Call: 1, Method: "GET", Path: "Patient"})
	w.send(&header{T: msgNeedCode, ID: id + 100})
	w.answer(id, sandbox.Result{Text: "first"})
	w.answer(id, sandbox.Result{Text: "second"})
	if o := wait(t, out); o.err != nil || o.res.Text != "first" {
		t.Fatalf("got %+v %v", o.res, o.err)
	}
	out = w.run(context.Background(), j)
	w.answer(w.next().h.ID, sandbox.Result{Text: "next"})
	if o := wait(t, out); o.err != nil || o.res.Text != "next" {
		t.Errorf("the next run: %+v %v", o.res, o.err)
	}
}

// recordingHost answers from a function and records what it was asked.
type recordingHost struct {
	mu      sync.Mutex
	got     []string
	respond func() (int, string, []byte, error)
}

func (h *recordingHost) Request(ctx context.Context, method, path string, body []byte, ct string) (int, string, []byte, error) {
	h.mu.Lock()
	h.got = append(h.got, method+" "+path+" "+ct+" "+string(body))
	h.mu.Unlock()
	return h.respond()
}

func TestProcHostCalls(t *testing.T) {
	tests := []struct {
		name        string
		respond     func() (int, string, []byte, error)
		status      int
		contentType string
		body        string
	}{
		{"an answer", func() (int, string, []byte, error) {
			return 201, "application/fhir+json", []byte(`{"id":"1"}`), nil
		}, 201, "application/fhir+json", `{"id":"1"}`},
		{"a *fhir.Error", func() (int, string, []byte, error) {
			return 0, "", nil, fhir.Conflict("version mismatch")
		}, 409, "application/fhir+json", string(fhir.Conflict("version mismatch").JSON())},
		{"any other error reveals nothing", func() (int, string, []byte, error) {
			return 0, "", nil, errors.New("dial tcp 10.0.0.7:4222: connection refused")
		}, 500, "application/fhir+json", string(fhir.Internal().JSON())},
		{"an answer too large for a frame", func() (int, string, []byte, error) {
			return 200, "application/json", make([]byte, maxFrame), nil
		}, 413, "application/fhir+json", string(fhir.TooLarge("Response too large").JSON())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorker(t)
			host := &recordingHost{respond: tt.respond}
			j, _ := countedJob("k", nil)
			j.Host = host
			out := w.run(context.Background(), j)
			id := w.next().h.ID
			w.send(&header{T: msgHost, ID: id, Call: 5, Method: "POST", Path: "Patient", ContentType: "application/fhir+json"}, []byte(`{"resourceType":"Patient"}`))
			f := w.next()
			if f.h.T != msgHostReply || f.h.ID != id || f.h.Call != 5 || f.h.Status != tt.status || f.h.ContentType != tt.contentType || string(f.payload) != tt.body {
				t.Errorf("reply %+v %.200q", f.h, f.payload)
			}
			host.mu.Lock()
			if len(host.got) != 1 || host.got[0] != `POST Patient application/fhir+json {"resourceType":"Patient"}` {
				t.Errorf("host asked %q", host.got)
			}
			host.mu.Unlock()
			w.answer(id, sandbox.Result{})
			wait(t, out)
		})
	}
}

func TestProcCompile(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		reply func(w *fakeWorker, id uint64)
		check func(o outcome) bool
		known bool
	}{
		{"the JavaScript, kept under its key", "k1", func(w *fakeWorker, id uint64) {
			w.send(&header{T: msgCompiled, ID: id}, []byte("exports.handler = 1;"))
		}, func(o outcome) bool { return o.err == nil && o.js == "exports.handler = 1;" }, true},
		{"without a key, nothing kept", "", func(w *fakeWorker, id uint64) {
			w.send(&header{T: msgCompiled, ID: id}, []byte("js"))
		}, func(o outcome) bool { return o.err == nil && o.js == "js" }, false},
		{"a syntax error", "k2", func(w *fakeWorker, id uint64) {
			w.send(&header{T: msgCompiled, ID: id, Fault: faultOf(fhir.BadRequest("Syntax error at line 1"))})
		}, func(o outcome) bool {
			var fe *fhir.Error
			return errors.As(o.err, &fe) && fe.Status == 400 && fe.Message() == "Syntax error at line 1"
		}, false},
		{"a compiler that ends its worker", "k3", func(w *fakeWorker, id uint64) {
			w.end("exit status 2: runtime: goroutine stack exceeds 67108864-byte limit")
		}, func(o outcome) bool {
			var fe *fhir.Error
			return errors.As(o.err, &fe) && fe.Status == 400 &&
				fe.Message() == "The code could not be compiled: the compiler stopped (stack overflow); is it nested too deeply?"
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorker(t)
			out := w.compile(context.Background(), tt.key, "const a: number = 1;")
			f := w.next()
			if f.h.T != msgCompile || f.h.Name != "Bot/c" || f.h.Key != tt.key || f.h.Filename != "bot.ts" || string(f.payload) != "const a: number = 1;" {
				t.Fatalf("compile frame %+v %q", f.h, f.payload)
			}
			tt.reply(w, f.h.ID)
			if o := wait(t, out); !tt.check(o) {
				t.Errorf("got %q, %v", o.js, o.err)
			}
			if tt.key != "" && w.pr.known.Contains(tt.key) != tt.known {
				t.Errorf("known %v, want %v", !tt.known, tt.known)
			}
		})
	}
	t.Run("the caller goes away", func(t *testing.T) {
		w := newFakeWorker(t)
		ctx, cancel := context.WithCancel(context.Background())
		out := w.compile(ctx, "k", "x")
		w.next()
		cancel()
		if o := wait(t, out); !errors.Is(o.err, context.Canceled) {
			t.Errorf("got %q, %v", o.js, o.err)
		}
	})
}

// A run abandoned in a built-in still holds a goroutine in its worker: the
// worker takes no more runs and is stopped once idle.
func TestProcStuckRetires(t *testing.T) {
	w := newFakeWorker(t)
	// retire names the process; give it one that has already ended (this
	// test binary, running no tests).
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	w.pr.cmd = cmd
	s := &slot{proc: w.pr}
	j, _ := countedJob("k", nil)
	out := w.run(context.Background(), j)
	id := w.next().h.ID
	if s.current() != w.pr {
		t.Fatal("a serving worker is not current")
	}
	res := sandbox.Result{Err: &sandbox.BotError{Message: "Bot timed out after 10 ms (the bot was stuck in a built-in function and was abandoned)", Limit: sandbox.LimitTimeout}}
	w.send(&header{T: msgResult, ID: id, Result: &res, Stuck: true})
	if o := wait(t, out); o.err != nil || o.res.Err == nil || o.res.Err.Limit != sandbox.LimitTimeout {
		t.Fatalf("got %+v %v", o.res, o.err)
	}
	if !w.pr.retired.Load() || s.current() != nil {
		t.Error("a worker with a stuck run still takes runs")
	}
	if !w.closed() {
		t.Error("the idle retired worker's input was not closed")
	}
	if r := w.pr.endReason(); r != "a run was stuck in a built-in function" {
		t.Errorf("end reason %q", r)
	}
}
