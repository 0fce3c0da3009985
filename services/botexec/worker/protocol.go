// Package worker runs bots in worker processes, so that nothing a bot
// does can take the process that serves the API down with it.
//
// A fatal Go runtime error is not a panic: out of memory, a goroutine stack
// overflow (deep recursion inside a built-in, or in the parser of deeply
// nested source) and concurrent map misuse end the process, and recover()
// cannot stop them. Bot code is hostile input to an interpreter written in
// Go, so bots are compiled and run in child processes started from the
// same binary (MainIfWorker diverts them before anything else starts):
//
//   - each worker caps its address space (RLIMIT_AS) and runs at a lower
//     CPU priority than its parent, so a bot that allocates without end
//     kills its worker, not the server, and spinning bots cannot starve the
//     API of CPU;
//   - the parent watches every run: a worker that does not answer by the
//     run's deadline plus a grace period is killed, so a built-in that
//     ignores interrupts cannot hold a CPU for ever;
//   - a worker that dies fails only the runs it held, which are answered at
//     once, and is restarted for the next run.
//
// The protocol is framed messages over two pipes (fds 3 and 4 of the
// child; stdout and stderr stay free for logs): a frame is a 4-byte length,
// a 4-byte header length, a JSON header and a raw payload (code, input,
// request and response bodies travel unescaped).
package worker

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// Message types.
const (
	msgReady     = "ready"      // child → parent: started, limits set
	msgRun       = "run"        // parent → child: run a program
	msgCancel    = "cancel"     // parent → child: the caller went away
	msgResult    = "result"     // child → parent: a run's outcome
	msgNeedCode  = "need-code"  // child → parent: resend the run with its code
	msgHost      = "host"       // child → parent: a bot's medplum call
	msgHostReply = "host-reply" // parent → child: its answer
	msgCompile   = "compile"    // parent → child: transpile and compile
	msgCompiled  = "compiled"   // child → parent: the JavaScript, or a syntax error
)

// maxFrame bounds one frame: the largest code, input or answer plus room
// for its header. A bigger frame means a broken peer.
const maxFrame = 64 << 20

// header is the JSON part of a frame; which fields are set depends on T.
type header struct {
	T    string `json:"t"`
	ID   uint64 `json:"id"`             // run or compile
	Call uint64 `json:"call,omitempty"` // host call within a run

	// run
	Key       string          `json:"key,omitempty"`  // program cache key
	Name      string          `json:"name,omitempty"` // program name (Bot/<id>)
	CodeLen   int             `json:"codeLen,omitempty"`
	Event     *eventHeader    `json:"event,omitempty"`
	Limits    *sandbox.Limits `json:"limits,omitempty"`
	InputKind string          `json:"inputKind,omitempty"`

	// result
	Result  *sandbox.Result `json:"result,omitempty"`
	TextLen int             `json:"textLen,omitempty"` // payload: Text, then JSON
	Fault   *fault          `json:"fault,omitempty"`
	// Stuck: a run in this worker was abandoned in a built-in that ignored
	// its interrupt, and still holds a goroutine; the worker should go.
	Stuck bool `json:"stuck,omitempty"`

	// host call and reply
	Method      string `json:"method,omitempty"`
	Path        string `json:"path,omitempty"`
	ContentType string `json:"contentType,omitempty"`
	Status      int    `json:"status,omitempty"`

	// compile and compiled (payload: code, or the JavaScript)
	Filename string `json:"filename,omitempty"`
}

// eventHeader is sandbox.Event without its input, which is the payload.
type eventHeader struct {
	Bot         map[string]any    `json:"bot,omitempty"`
	Requester   map[string]any    `json:"requester,omitempty"`
	ContentType string            `json:"contentType,omitempty"`
	Secrets     map[string]any    `json:"secrets,omitempty"`
	TraceID     string            `json:"traceId,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// Input kinds: how the payload becomes event.input.
const (
	inputUndefined = "undefined"
	inputText      = "text" // a string
	inputJSON      = "json" // parsed JSON
	inputHL7       = "hl7"  // ER7 text, an Hl7Message in the bot
)

// fault is an error that is not the bot's own failure: a run that could not
// start (a 400 or 413 *fhir.Error, such as malformed HL7) or an internal
// fault of the worker.
type fault struct {
	Status  int                    `json:"status"`
	Outcome *fhir.OperationOutcome `json:"outcome,omitempty"`
	Message string                 `json:"message,omitempty"`
}

func faultOf(err error) *fault {
	var fe *fhir.Error
	if errors.As(err, &fe) {
		o := fe.Outcome
		return &fault{Status: fe.Status, Outcome: &o}
	}
	return &fault{Status: 500, Message: err.Error()}
}

func (f *fault) err() error {
	if f.Outcome != nil {
		return &fhir.Error{Status: f.Status, Outcome: *f.Outcome}
	}
	return fmt.Errorf("bot worker: %s", f.Message)
}

// conn reads and writes frames; writes are serialised, reads are for one
// goroutine.
type conn struct {
	r  *bufio.Reader
	mu sync.Mutex
	w  *bufio.Writer
}

func newConn(r io.Reader, w io.Writer) *conn {
	return &conn{r: bufio.NewReaderSize(r, 64<<10), w: bufio.NewWriterSize(w, 64<<10)}
}

// send writes one frame and flushes it.
func (c *conn) send(h *header, payload ...[]byte) error {
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	n := 4 + len(hb)
	for _, p := range payload {
		n += len(p)
	}
	if n > maxFrame {
		return fmt.Errorf("bot worker: frame of %d bytes is over the limit", n)
	}
	var pre [8]byte
	binary.BigEndian.PutUint32(pre[:4], uint32(n))
	binary.BigEndian.PutUint32(pre[4:], uint32(len(hb)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(pre[:]); err != nil {
		return err
	}
	if _, err := c.w.Write(hb); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := c.w.Write(p); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

// recv reads one frame.
func (c *conn) recv() (*header, []byte, error) {
	var pre [8]byte
	if _, err := io.ReadFull(c.r, pre[:]); err != nil {
		return nil, nil, err
	}
	n, hn := binary.BigEndian.Uint32(pre[:4]), binary.BigEndian.Uint32(pre[4:])
	if n > maxFrame || n < 4 || hn > n-4 { // not hn+4 > n, which wraps
		return nil, nil, fmt.Errorf("bot worker: bad frame (%d bytes, header %d)", n, hn)
	}
	buf := make([]byte, n-4)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return nil, nil, err
	}
	h := &header{}
	if err := json.Unmarshal(buf[:hn], h); err != nil {
		return nil, nil, fmt.Errorf("bot worker: bad frame header: %w", err)
	}
	return h, buf[hn:], nil
}
