package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// envWorker marks a process started as a bot worker; its value is the
// address-space budget in bytes.
const envWorker = "PINION_BOT_WORKER"

// MainIfWorker turns this process into a bot worker when it was started as
// one, and never returns then; otherwise it returns at once. Every main
// (and TestMain) of a binary that runs bots calls it first: the worker is
// the same binary, started again.
func MainIfWorker() {
	budget := os.Getenv(envWorker)
	if budget == "" {
		return
	}
	os.Exit(childMain(budget))
}

func childMain(budget string) int {
	var limit int64
	if _, err := fmt.Sscan(budget, &limit); err != nil {
		fmt.Fprintln(os.Stderr, "bot worker: bad", envWorker, budget)
		return 2
	}
	if err := confine(limit); err != nil {
		fmt.Fprintln(os.Stderr, "bot worker: cannot set its limits:", err)
		return 2
	}
	if err := pollable(3, 4); err != nil {
		fmt.Fprintln(os.Stderr, "bot worker: started without its pipes:", err)
		return 2
	}
	in, out := os.NewFile(3, "from-parent"), os.NewFile(4, "to-parent")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "bot worker: started without its pipes")
		return 2
	}
	return serve(newConn(in, out))
}

// serve is a worker's life once its limits are set: it says it is ready,
// then answers the parent on c until the parent closes its end.
func serve(c *conn) int {
	ch := &child{c: c, runs: map[uint64]*childRun{}}
	ch.programs, _ = lru.New[string, *sandbox.Program](programCache)
	if err := c.send(&header{T: msgReady}); err != nil {
		return 1
	}
	// The parent closing the pipe (it stopped, or it is done with us) ends
	// the worker.
	for {
		h, payload, err := c.recv()
		if err != nil {
			return 0
		}
		ch.dispatch(h, payload)
	}
}

// maxStack bounds one goroutine's stack in a worker: deep enough for any
// bot within its call-depth limit and any sane source, and reached in well
// under a second by a recursion inside a built-in or a parser (Go's
// default is 1 GB).
const maxStack = 64 << 20

// programCache is how many compiled programs a worker keeps.
const programCache = 512

type child struct {
	c        *conn
	programs *lru.Cache[string, *sandbox.Program]
	mu       sync.Mutex
	runs     map[uint64]*childRun
}

// childRun is a run in progress in this worker.
type childRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	calls  map[uint64]chan hostReply
	next   atomic.Uint64
}

type hostReply struct {
	status      int
	contentType string
	body        []byte
}

func (ch *child) dispatch(h *header, payload []byte) {
	switch h.T {
	case msgRun:
		// Registered before it starts, so that a cancel sent right after
		// the run (while it compiles, say) is not lost.
		go ch.run(ch.register(h.ID), h, payload)
	case msgCompile:
		go ch.compile(h, payload)
	case msgCancel:
		ch.mu.Lock()
		r := ch.runs[h.ID]
		ch.mu.Unlock()
		if r != nil {
			r.cancel()
		}
	case msgHostReply:
		ch.mu.Lock()
		r := ch.runs[h.ID]
		ch.mu.Unlock()
		if r == nil {
			return
		}
		r.mu.Lock()
		reply := r.calls[h.Call]
		delete(r.calls, h.Call)
		r.mu.Unlock()
		if reply != nil {
			reply <- hostReply{status: h.Status, contentType: h.ContentType, body: payload}
		}
	}
}

// register records a run so that cancels and host replies can find it.
func (ch *child) register(id uint64) *childRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &childRun{ctx: ctx, cancel: cancel, calls: map[uint64]chan hostReply{}}
	ch.mu.Lock()
	ch.runs[id] = r
	ch.mu.Unlock()
	return r
}

// run compiles (or finds) the program, builds the event and runs it.
func (ch *child) run(r *childRun, h *header, payload []byte) {
	defer func() {
		r.cancel()
		ch.mu.Lock()
		if ch.runs[h.ID] == r { // not the same run resent with its code
			delete(ch.runs, h.ID)
		}
		ch.mu.Unlock()
	}()
	if h.CodeLen < 0 || h.CodeLen > len(payload) || h.Event == nil || h.Limits == nil {
		_ = ch.c.send(&header{T: msgResult, ID: h.ID, Fault: faultOf(errorf("malformed run"))})
		return
	}
	code, input := payload[:h.CodeLen], payload[h.CodeLen:]
	prog, ok := ch.programs.Get(h.Key)
	if !ok {
		if h.CodeLen == 0 {
			_ = ch.c.send(&header{T: msgNeedCode, ID: h.ID})
			return
		}
		p, err := sandbox.Compile(h.Name, string(code))
		if err != nil {
			_ = ch.c.send(&header{T: msgResult, ID: h.ID, Fault: faultOf(err)})
			return
		}
		ch.programs.Add(h.Key, p)
		prog = p
	}
	ev := sandbox.Event{ContentType: h.Event.ContentType, Bot: h.Event.Bot, Requester: h.Event.Requester,
		Secrets: h.Event.Secrets, TraceID: h.Event.TraceID, Headers: h.Event.Headers}
	switch h.InputKind {
	case inputText, inputHL7:
		ev.Input = string(input)
	case inputJSON:
		ev.Input = json.RawMessage(input)
	}
	stuck := sandbox.StuckRuns()
	res, err := sandbox.Run(r.ctx, prog, ev, &childHost{ch: ch, run: r, id: h.ID}, *h.Limits)
	if err != nil {
		_ = ch.c.send(&header{T: msgResult, ID: h.ID, Fault: faultOf(err)})
		return
	}
	text, js := []byte(res.Text), []byte(res.JSON)
	res.Text, res.JSON = "", nil
	out := &header{T: msgResult, ID: h.ID, Result: res, TextLen: len(text), Stuck: sandbox.StuckRuns() > stuck}
	if err := ch.c.send(out, text, js); err != nil {
		// Too large to send (the output limit should prevent it): say so.
		_ = ch.c.send(&header{T: msgResult, ID: h.ID, Fault: faultOf(err)})
	}
}

// compile transpiles and compiles code, keeping the program under the
// key given, and answers the JavaScript.
func (ch *child) compile(h *header, code []byte) {
	js, err := sandbox.Transpile(string(code), h.Filename)
	if err == nil {
		var p *sandbox.Program
		if p, err = sandbox.Compile(h.Name, js); err == nil && h.Key != "" {
			ch.programs.Add(h.Key, p)
		}
	}
	if err != nil {
		_ = ch.c.send(&header{T: msgCompiled, ID: h.ID, Fault: faultOf(err)})
		return
	}
	_ = ch.c.send(&header{T: msgCompiled, ID: h.ID}, []byte(js))
}

// childHost carries a bot's medplum calls to the parent, which makes them
// as the bot's identity.
type childHost struct {
	ch  *child
	run *childRun
	id  uint64
}

func (h *childHost) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	call := h.run.next.Add(1)
	reply := make(chan hostReply, 1)
	h.run.mu.Lock()
	h.run.calls[call] = reply
	h.run.mu.Unlock()
	err := h.ch.c.send(&header{T: msgHost, ID: h.id, Call: call, Method: method, Path: path, ContentType: contentType}, body)
	if err != nil {
		h.run.mu.Lock()
		delete(h.run.calls, call)
		h.run.mu.Unlock()
		e := fhir.TooLarge("Request too large")
		return e.Status, "application/fhir+json", e.JSON(), nil
	}
	select {
	case r := <-reply:
		return r.status, r.contentType, r.body, nil
	case <-ctx.Done():
		h.run.mu.Lock()
		delete(h.run.calls, call)
		h.run.mu.Unlock()
		return 0, "", nil, ctx.Err()
	}
}
