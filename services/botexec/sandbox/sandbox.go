// Package sandbox runs bots: user JavaScript handlers invoked as
// exports.handler(medplum, event), the way Medplum's vmcontext runtime does,
// on goja with an event loop of its own.
//
// Every Run gets a new goja runtime, so nothing a bot sets on globalThis or
// on a prototype can reach another run; the shared parts (the compiled bot and
// the compiled prelude that defines console, timers, the medplum client,
// Hl7Message and friends) are immutable goja Programs. Runtimes are not
// pooled: goja.New costs about a microsecond and evaluating the prelude about
// 0.1 ms (most of it builds functions, which is why the rarely used parts are
// built on first use), while proving that a reset runtime carries nothing
// over would mean auditing every builtin a bot can mutate. The host is reachable
// only through Host.Request; there is no require of host modules, no process,
// file system, network or environment, and no timer outlives its run.
//
// Limits and how they are enforced:
//   - Timeout: one wall-clock deadline for the whole run (synchronous loops
//     and async waits alike). When it passes, the runtime is interrupted
//     (goja checks the flag between instructions), the loop stops, and
//     pending timers and host requests are abandoned (their context is
//     cancelled).
//   - MemoryBytes: goja has no allocator limit, so a process-wide guard
//     samples the Go heap (runtime/metrics) every few milliseconds while runs
//     are active, confirms real growth with a forced GC before acting, and
//     interrupts the run that grew the heap past its budget. The prelude also
//     caps the single built-in calls that could allocate gigabytes between
//     two samples (String repeat/padStart/padEnd, Array fill/from, and
//     JSON.stringify of deeply nested or exponentially shared data). See
//     memguard.go for what this cannot do.
//   - MaxOutputBytes: the serialised result is measured before it is handed
//     back.
//   - MaxLogBytes: console output beyond it is dropped and a marker added.
//   - MaxCallDepth: goja's call-stack limit turns runaway recursion into an
//     error instead of unbounded memory growth.
//
// Built-in functions are Go code that an interrupt cannot reach, so two more
// guards keep one bot from holding the process: regular-expression matches
// time out after a second (goja then reports no match), and a run whose
// runtime still has not stopped a second after its deadline is abandoned —
// Run returns, the goroutine finishes the built-in in the background, and
// StuckRuns counts it.
package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Host is what a bot's `medplum` client calls: one request to the FHIR API,
// made by the host as the bot's identity. path is relative to the FHIR base,
// e.g. "Patient/123" or "Patient?name=x"; body may be nil. A non-nil err that
// is a *fhir.Error is answered to the bot as that outcome; any other err as a
// 500 that reveals nothing. Request is called from goroutines other than the
// caller of Run, concurrently, and must honour ctx.
type Host interface {
	Request(ctx context.Context, method, path string, body []byte, contentType string) (status int, respType string, respBody []byte, err error)
}

// HL7ContentType is the content type under which event.input is an Hl7Message.
const HL7ContentType = "x-application/hl7-v2+er7"

// Event is what the handler receives as its second argument.
type Event struct {
	// Bot and Requester are references ({reference, display}).
	Bot, Requester map[string]any
	// Input is the parsed request body: a string, decoded JSON
	// (map[string]any, []any, float64, bool, nil, json.Number), a
	// json.RawMessage (which keeps the client's key order, unlike a map),
	// an *hl7.Message, or, when ContentType is HL7ContentType (parameters
	// ignored), ER7 text; the last two become an Hl7Message object.
	Input any
	// ContentType is passed to the bot as given, parameters included.
	ContentType string
	Secrets     map[string]any
	TraceID     string
	Headers     map[string]string
}

// Limits bound one run. A zero field takes its value from DefaultLimits.
type Limits struct {
	Timeout        time.Duration
	MemoryBytes    int64
	MaxOutputBytes int
	MaxLogBytes    int
	// MaxCallDepth bounds JavaScript call nesting.
	MaxCallDepth int
}

// DefaultLimits are Medplum's defaults where it has one (10 s), and
// docs/API.md's (8 MiB output, 10 KiB log) otherwise.
var DefaultLimits = Limits{
	Timeout:        10 * time.Second,
	MemoryBytes:    256 << 20,
	MaxOutputBytes: 8 << 20,
	MaxLogBytes:    10 << 10,
	MaxCallDepth:   10000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.Timeout > 0 {
		d.Timeout = l.Timeout
	}
	if l.MemoryBytes > 0 {
		d.MemoryBytes = l.MemoryBytes
	}
	if l.MaxOutputBytes > 0 {
		d.MaxOutputBytes = l.MaxOutputBytes
	}
	if l.MaxLogBytes > 0 {
		d.MaxLogBytes = l.MaxLogBytes
	}
	if l.MaxCallDepth > 0 {
		d.MaxCallDepth = l.MaxCallDepth
	}
	return d
}

// Kind is the JavaScript type of what a handler returned.
type Kind int

// The kinds of result a handler can return.
const (
	KindUndefined Kind = iota // undefined, or nothing JSON can carry (a function, a symbol)
	KindNull                  // null
	KindString                // a string: Text
	KindNumber                // a number or bigint: Text is its JavaScript string form
	KindBoolean               // true or false: Text
	KindJSON                  // an object or array that is not a FHIR resource: JSON
	KindResource              // an object with a string resourceType: JSON, ResourceType
	KindHL7                   // an Hl7Message: Text is its ER7 form
)

var kindNames = [...]string{"undefined", "null", "string", "number", "boolean", "json", "resource", "hl7"}

// String is the kind's name, as JavaScript's typeof would say it roughly.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Result is the outcome of one run. Err is nil when the handler's promise
// fulfilled; otherwise the value fields are empty.
type Result struct {
	Kind Kind
	// Text is the string, number, boolean or HL7 text.
	Text string
	// JSON is the JSON encoding of every kind except undefined and HL7.
	JSON         json.RawMessage
	ResourceType string
	// Log is the captured console output, one line per call.
	Log          string
	LogTruncated bool
	Err          *BotError
	Elapsed      time.Duration
}

// Limit names the limit that stopped a run.
type Limit string

// The limits a run can hit; the empty Limit means the bot threw.
const (
	LimitTimeout   Limit = "timeout"
	LimitMemory    Limit = "memory"
	LimitOutput    Limit = "output"
	LimitCallDepth Limit = "call-depth"
	LimitCancelled Limit = "cancelled"
	// LimitWorker: the worker process running the bot ended under it (out
	// of memory, a stack overflow, killed for not stopping).
	LimitWorker Limit = "worker"
)

// BotError is why a run failed: what the bot threw (or how its promise
// rejected), or the limit that stopped it.
type BotError struct {
	Message string
	// Outcome is the OperationOutcome the thrown error carried (an
	// OperationOutcomeError's `outcome`); nil for plain errors and limits.
	Outcome *fhir.OperationOutcome
	Limit   Limit
	Stack   string
}

// Error is the message, so that a BotError can travel as an error.
func (e *BotError) Error() string { return e.Message }

// OperationOutcome is the outcome to answer with, as Medplum does: the one
// the error carried, else a 400 with the message.
func (e *BotError) OperationOutcome() *fhir.OperationOutcome {
	if e.Outcome != nil {
		return e.Outcome
	}
	o := fhir.BadRequest(e.Message).Outcome
	return &o
}

// Value decodes JSON (numbers as float64, objects as map[string]any); it is
// nil for undefined and for HL7, whose value is Text.
func (r *Result) Value() (any, error) {
	if len(r.JSON) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(r.JSON, &v); err != nil {
		return nil, fmt.Errorf("bot result: %w", err)
	}
	return v, nil
}
