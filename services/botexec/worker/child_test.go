package worker

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// peer is one end of a framed connection, with reads that have a deadline.
type peer struct {
	t      *testing.T
	c      *conn
	frames chan frame
}

// next is the next frame from the other end.
func (p *peer) next() frame {
	p.t.Helper()
	select {
	case f, ok := <-p.frames:
		if !ok {
			p.t.Fatal("the other end closed the connection")
		}
		return f
	case <-time.After(10 * time.Second):
		p.t.Fatal("no frame within 10 s")
	}
	return frame{}
}

// closed reports whether the other end closed the connection within 10 s,
// discarding frames until then.
func (p *peer) closed() bool {
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-p.frames:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func (p *peer) send(h *header, payload ...[]byte) {
	p.t.Helper()
	if err := p.c.send(h, payload...); err != nil {
		p.t.Fatal(err)
	}
}

// pipes connects two ends in this process: what one sends the other
// reads. closeA closes a's end, both ways, as a process's exit would.
func pipes(t *testing.T) (a, b *conn, closeA func()) {
	bIn, aOut := io.Pipe()
	aIn, bOut := io.Pipe()
	a, b = newConn(aIn, aOut), newConn(bIn, bOut)
	closeA = func() { aOut.Close(); aIn.Close() }
	t.Cleanup(closeA)
	t.Cleanup(func() { bOut.Close(); bIn.Close() })
	return a, b, closeA
}

// reader collects the frames c receives until it fails.
func reader(t *testing.T, c *conn) *peer {
	p := &peer{t: t, c: c, frames: make(chan frame, 64)}
	go func() {
		defer close(p.frames)
		for {
			h, payload, err := c.recv()
			if err != nil {
				return
			}
			p.frames <- frame{h, payload}
		}
	}()
	return p
}

// startChild serves a worker in this process, as childMain does once it
// has set its limits, and returns the parent's end after the worker said
// it is ready.
func startChild(t *testing.T) *peer {
	t.Helper()
	parent, childEnd, _ := pipes(t)
	go serve(childEnd)
	p := reader(t, parent)
	if f := p.next(); f.h.T != msgReady {
		t.Fatalf("first frame %q, want ready", f.h.T)
	}
	return p
}

var quick = &sandbox.Limits{Timeout: 5 * time.Second}

// runFrame is a run of code (sent along unless empty) on input.
func runFrame(id uint64, key, code, kind, input string) (*header, []byte, []byte) {
	return &header{T: msgRun, ID: id, Key: key, Name: "Bot/" + key, CodeLen: len(code), Event: &eventHeader{}, Limits: quick, InputKind: kind}, []byte(code), []byte(input)
}

// result is a run's answer: its result with Text and JSON from the payload.
func result(t *testing.T, f frame) *sandbox.Result {
	t.Helper()
	if f.h.T != msgResult {
		t.Fatalf("got a %q frame, want a result", f.h.T)
	}
	if f.h.Fault != nil {
		t.Fatalf("fault %+v: %v", f.h.Fault, f.h.Fault.err())
	}
	res := f.h.Result
	res.Text = string(f.payload[:f.h.TextLen])
	res.JSON = f.payload[f.h.TextLen:]
	return res
}

func TestChildRunsAndCaches(t *testing.T) {
	p := startChild(t)
	p.send(runFrame(1, "k1", echo, inputText, "hello"))
	f := p.next()
	res := result(t, f)
	if f.h.ID != 1 || res.Err != nil || res.Kind != sandbox.KindString || res.Text != "hello" || string(res.JSON) != `"hello"` || f.h.Stuck {
		t.Fatalf("result %+v (id %d, stuck %v)", res, f.h.ID, f.h.Stuck)
	}
	// The program is kept under its key: a run without code uses it.
	p.send(runFrame(2, "k1", "", inputText, "again"))
	if res := result(t, p.next()); res.Text != "again" {
		t.Errorf("cached run answered %q", res.Text)
	}
	// An unknown key without code is asked for its code.
	p.send(runFrame(3, "k2", "", inputText, "x"))
	if f := p.next(); f.h.T != msgNeedCode || f.h.ID != 3 {
		t.Errorf("got %+v, want need-code for run 3", f.h)
	}
	// Code that does not compile is a 400 and is not kept.
	p.send(runFrame(4, "k3", "exports.handler = ;", inputText, "x"))
	f = p.next()
	if f.h.T != msgResult || f.h.Fault == nil || f.h.Fault.Status != 400 || f.h.Fault.Outcome == nil ||
		f.h.Fault.Outcome.Issue[0].Details.Text != "Syntax error at line 1, column 19 of Bot/k3: Unexpected token ;" {
		t.Fatalf("got %+v, fault %+v", f.h, f.h.Fault)
	}
	p.send(runFrame(5, "k3", "", inputText, "x"))
	if f := p.next(); f.h.T != msgNeedCode {
		t.Errorf("after a failed compile: %q, want need-code", f.h.T)
	}
}

func TestChildRefusesMalformedRuns(t *testing.T) {
	p := startChild(t)
	tests := []struct {
		name string
		h    *header
		code string
	}{
		{"no event", &header{T: msgRun, ID: 1, Key: "k", Limits: quick}, ""},
		{"no limits", &header{T: msgRun, ID: 2, Key: "k", Event: &eventHeader{}}, ""},
		{"code longer than the payload", &header{T: msgRun, ID: 3, Key: "k", Event: &eventHeader{}, Limits: quick, CodeLen: 100}, "short"},
		{"negative code length", &header{T: msgRun, ID: 4, Key: "k", Event: &eventHeader{}, Limits: quick, CodeLen: -1}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.t = t
			p.send(tt.h, []byte(tt.code))
			f := p.next()
			if f.h.T != msgResult || f.h.ID != tt.h.ID || f.h.Result != nil || f.h.Fault == nil ||
				f.h.Fault.Status != 500 || f.h.Fault.Message != "bot worker: malformed run" {
				t.Errorf("got %+v, fault %+v", f.h, f.h.Fault)
			}
		})
	}
}

func TestChildInputKinds(t *testing.T) {
	p := startChild(t)
	const describe = `exports.handler = async (m, e) => e.input === undefined ? 'undefined' : e.input instanceof Hl7Message ? 'hl7 ' + e.input.get('PID').getComponent(3, 1) : typeof e.input + ' ' + JSON.stringify(e.input);`
	tests := []struct {
		name, kind, contentType, input, want string
	}{
		{"text", inputText, "text/plain", `{"a":1}`, `string "{\"a\":1}"`},
		{"JSON keeps key order", inputJSON, "application/json", `{"b":[1,"x"],"a":null}`, `object {"b":[1,"x"],"a":null}`},
		{"HL7", inputHL7, sandbox.HL7ContentType, "MSH|^~\\&|A\rPID|1||42", "hl7 42"},
		// The service never sends these: the payload is dropped.
		{"undefined kind", inputUndefined, "text/plain", "ignored", "object null"},
		{"no kind", "", "text/plain", "ignored", "object null"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.t = t
			h, code, input := runFrame(uint64(i+1), "describe", describe, tt.kind, tt.input)
			h.Event.ContentType = tt.contentType
			p.send(h, code, input)
			if res := result(t, p.next()); res.Err != nil || res.Text != tt.want {
				t.Errorf("got %q (%+v), want %q", res.Text, res.Err, tt.want)
			}
		})
	}
	t.Run("malformed HL7 is a 400", func(t *testing.T) {
		p.t = t
		h, code, input := runFrame(10, "describe", "", inputHL7, "PID|1")
		h.Event.ContentType = sandbox.HL7ContentType
		p.send(h, code, input)
		f := p.next()
		if f.h.Fault == nil || f.h.Fault.Status != 400 || f.h.Fault.Outcome.Issue[0].Details.Text != "hl7: segment 1, column 1 (offset 0): message must start with an MSH segment" {
			t.Errorf("got %+v, fault %+v", f.h, f.h.Fault)
		}
	})
}

func TestChildEvent(t *testing.T) {
	p := startChild(t)
	h, code, input := runFrame(1, "event", `exports.handler = async (m, e) => [e.bot.reference, e.requester.reference, e.contentType, e.secrets.K.valueString, e.traceId, e.headers['x-h']].join(' ');`, inputText, "x")
	h.Event = &eventHeader{Bot: map[string]any{"reference": "Bot/1"}, Requester: map[string]any{"reference": "Practitioner/2"}, ContentType: "text/plain",
		Secrets: map[string]any{"K": map[string]any{"name": "K", "valueString": "s"}}, TraceID: "trace", Headers: map[string]string{"x-h": "yes"}}
	p.send(h, code, input)
	if res := result(t, p.next()); res.Text != "Bot/1 Practitioner/2 text/plain s trace yes" {
		t.Errorf("got %q (%+v)", res.Text, res.Err)
	}
}

// A bot's medplum call goes to the parent as a host frame; the parent's
// reply settles it.
func TestChildHostCalls(t *testing.T) {
	p := startChild(t)
	p.send(runFrame(1, "host", `exports.handler = async (m) => {
		const a = await m.createResource({resourceType: 'Patient'});
		const b = await m.readResource('Patient', a.id);
		return b.id + ' ' + b.meta;
	};`, inputUndefined, ""))
	call := p.next()
	if call.h.T != msgHost || call.h.ID != 1 || call.h.Call != 1 || call.h.Method != "POST" || call.h.Path != "Patient" ||
		call.h.ContentType != "application/fhir+json" || string(call.payload) != `{"resourceType":"Patient"}` {
		t.Fatalf("first call %+v %q", call.h, call.payload)
	}
	// Replies for runs and calls that do not exist are ignored.
	p.send(&header{T: msgHostReply, ID: 99, Call: 1, Status: 200}, []byte(`{}`))
	p.send(&header{T: msgHostReply, ID: 1, Call: 99, Status: 200}, []byte(`{}`))
	p.send(&header{T: msgHostReply, ID: 1, Call: 1, Status: 201, ContentType: "application/fhir+json"}, []byte(`{"resourceType":"Patient","id":"p1"}`))
	call = p.next()
	if call.h.T != msgHost || call.h.Call != 2 || call.h.Method != "GET" || call.h.Path != "Patient/p1" || len(call.payload) != 0 {
		t.Fatalf("second call %+v %q", call.h, call.payload)
	}
	// A second reply to an answered call is ignored too.
	p.send(&header{T: msgHostReply, ID: 1, Call: 1, Status: 500}, nil)
	p.send(&header{T: msgHostReply, ID: 1, Call: 2, Status: 200, ContentType: "application/fhir+json"}, []byte(`{"id":"p1","meta":"m"}`))
	if res := result(t, p.next()); res.Err != nil || res.Text != "p1 m" {
		t.Errorf("got %q (%+v)", res.Text, res.Err)
	}
}

func TestChildCancel(t *testing.T) {
	p := startChild(t)
	// Unknown runs are ignored.
	p.send(&header{T: msgCancel, ID: 42})
	// A cancel that comes while the run is still compiling is not lost.
	t.Run("a run that has not started", func(t *testing.T) {
		p.t = t
		p.send(runFrame(1, "loop", `exports.handler = async () => { for (;;) {} };`, inputUndefined, ""))
		p.send(&header{T: msgCancel, ID: 1})
		res := result(t, p.next())
		if res.Err == nil || res.Err.Limit != sandbox.LimitCancelled || res.Err.Message != "Bot execution cancelled: context canceled" {
			t.Errorf("got %+v", res.Err)
		}
	})
	t.Run("a bot waiting on the parent", func(t *testing.T) {
		p.t = t
		p.send(runFrame(2, "wait", `exports.handler = (m) => m.readResource('Patient', '1');`, inputUndefined, ""))
		if f := p.next(); f.h.T != msgHost {
			t.Fatalf("got %q, want a host call", f.h.T)
		}
		p.send(&header{T: msgCancel, ID: 2})
		res := result(t, p.next())
		if res.Err == nil || res.Err.Limit != sandbox.LimitCancelled {
			t.Errorf("got %+v", res.Err)
		}
	})
}

func TestChildCompile(t *testing.T) {
	p := startChild(t)
	p.send(&header{T: msgCompile, ID: 1, Name: "Bot/ts", Key: "ts-key", Filename: "bot.ts"}, []byte(`export async function handler(m: unknown, e: {input: string}): Promise<string> { return e.input + '!'; }`))
	f := p.next()
	if f.h.T != msgCompiled || f.h.ID != 1 || f.h.Fault != nil || !strings.Contains(string(f.payload), "exports") || strings.Contains(string(f.payload), "Promise<string>") {
		t.Fatalf("got %+v %q", f.h, f.payload)
	}
	// The program is kept under the key given.
	p.send(runFrame(2, "ts-key", "", inputText, "hi"))
	if res := result(t, p.next()); res.Text != "hi!" {
		t.Errorf("run of the compiled program: %q (%+v)", res.Text, res.Err)
	}
	// Without a key it is not kept.
	p.send(&header{T: msgCompile, ID: 3, Name: "Bot/nokey", Filename: "bot.js"}, []byte(echo))
	if f := p.next(); f.h.T != msgCompiled || f.h.Fault != nil || f.h.Key != "" {
		t.Fatalf("got %+v", f.h)
	}
	p.send(runFrame(4, "", "", inputText, "x"))
	if f := p.next(); f.h.T != msgNeedCode {
		t.Errorf("got %q, want need-code", f.h.T)
	}
	// A syntax error is a 400 naming the file.
	p.send(&header{T: msgCompile, ID: 5, Name: "Bot/bad", Key: "bad", Filename: "bad.ts"}, []byte("const x: number = ;"))
	f = p.next()
	if f.h.T != msgCompiled || f.h.Fault == nil || f.h.Fault.Status != 400 ||
		f.h.Fault.Outcome.Issue[0].Details.Text != `Syntax error at line 1, column 19 of bad.ts: Unexpected ";"` {
		t.Errorf("got %+v, fault %+v", f.h, f.h.Fault)
	}
}

func TestServeEnds(t *testing.T) {
	serveIn := func(t *testing.T, closeFirst bool) int {
		parent, childEnd, closeParent := pipes(t)
		p := reader(t, parent)
		if closeFirst {
			closeParent()
		}
		code := make(chan int, 1)
		go func() { code <- serve(childEnd) }()
		if !closeFirst {
			if f := p.next(); f.h.T != msgReady {
				t.Fatalf("first frame %q, want ready", f.h.T)
			}
			closeParent()
		}
		select {
		case c := <-code:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("serve did not return")
		}
		return -1
	}
	t.Run("when the parent closes its end", func(t *testing.T) {
		if code := serveIn(t, false); code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
	t.Run("when it cannot say it is ready", func(t *testing.T) {
		if code := serveIn(t, true); code != 1 {
			t.Errorf("exit code %d, want 1", code)
		}
	})
}
