package sandbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/dop251/goja"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/hl7"
)

//go:embed prelude.js
var preludeSource string

// prelude is compiled once per process; running a compiled program in a new
// runtime is what keeps a fresh global scope per run cheap.
var prelude = sync.OnceValues(func() (*goja.Program, error) {
	limitRegexps()
	return goja.Compile("prelude.js", preludeSource, true)
})

// limitRegexps bounds every regular-expression match goja will compile from
// now on (literals are compiled with the program, so Compile calls it too).
// goja runs patterns that need backtracking on regexp2, whose matches ignore
// interrupts; without a timeout one catastrophic pattern would hold a
// goroutine forever. On timeout goja reports "no match". The setting is
// process-wide; nothing else in botexec uses regexp2.
var limitRegexps = sync.OnceFunc(func() { regexp2.DefaultMatchTimeout = regexpMatchTimeout })

// regexpMatchTimeout bounds one regular-expression match.
const regexpMatchTimeout = time.Second

// preludeExports are the functions the prelude hands back to Go, taken
// before bot code runs so that a bot replacing globals cannot change them.
type preludeExports struct {
	medplum       goja.Value
	require       goja.Value
	isHl7         goja.Callable
	hl7FromNative goja.Callable
	hl7ToString   goja.Callable
	stringify     goja.Callable
	errorInfo     goja.Callable
	parse         goja.Callable
}

// runState is one run: its runtime, its event loop and its captured log.
// Everything but post, stop and the fields they touch belongs to the
// goroutine that called Run.
type runState struct {
	vm   *goja.Runtime
	ctx  context.Context
	host Host
	lim  Limits
	exp  preludeExports

	mu     sync.Mutex
	posted []func() error
	wake   chan struct{}

	stopOnce sync.Once
	reason   atomic.Pointer[BotError]
	done     chan struct{}

	busySince atomic.Int64 // unix nanoseconds when it last left a wait, 0 while waiting
	busyTotal atomic.Int64 // nanoseconds spent outside waits before that

	// deadline is when the run times out; the loop checks it too, so that
	// a timer due at the deadline never fires before the deadline's stop.
	deadline time.Time

	timers    timerHeap
	timerByID map[int64]*timer
	timerSeq  int64

	hostPending int // requests made and not yet answered to JS
	hostActive  int // requests running on a goroutine
	hostQueue   []hostCall

	log logBuffer
}

// Run executes exports.handler(medplum, event) of p in a fresh global scope
// and waits for the promise it returns. A failure of the bot, including
// hitting a limit or ctx being cancelled, is reported in Result.Err; the
// error return is only for runs that could not start (malformed HL7 input is
// a 400 *fhir.Error) or an internal fault of the runtime.
func Run(ctx context.Context, p *Program, ev Event, host Host, lim Limits) (res *Result, err error) {
	if p == nil || p.prog == nil {
		return nil, errors.New("sandbox: nil program")
	}
	pre, err := prelude()
	if err != nil {
		return nil, fmt.Errorf("sandbox: prelude: %w", err)
	}
	var msg *hl7.Message
	if m, ok := ev.Input.(*hl7.Message); ok {
		msg = m
	} else if isHL7(ev.ContentType) {
		if msg, err = hl7Input(ev.Input); err != nil {
			return nil, err
		}
	}
	lim = lim.withDefaults()
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &runState{
		vm:        goja.New(),
		ctx:       runCtx,
		host:      host,
		lim:       lim,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		timerByID: map[int64]*timer{},
		log:       logBuffer{max: lim.MaxLogBytes},
	}
	st.vm.SetMaxCallStackSize(lim.MaxCallDepth)

	st.deadline = start.Add(lim.Timeout)
	deadline := time.AfterFunc(lim.Timeout, st.timedOut)
	defer deadline.Stop()
	stopOnCancel := context.AfterFunc(ctx, func() {
		st.stop(&BotError{Message: "Bot execution cancelled: " + context.Cause(ctx).Error(), Limit: LimitCancelled})
	})
	defer stopOnCancel()
	defer guard.watch(st, lim.MemoryBytes)()

	// The bot runs on a goroutine of its own so that Run can return even
	// when the runtime cannot be interrupted: goja checks for interrupts
	// between instructions, not inside a long built-in call (a huge sort or
	// join, say). Such a run is abandoned after stuckGrace; it keeps its
	// goroutine until the built-in returns, and StuckRuns counts it.
	finished := make(chan runOutcome, 1)
	go func() { finished <- st.runToResult(pre, p, ev, msg) }()
	var out runOutcome
	select {
	case out = <-finished:
	case <-st.done:
		select {
		case out = <-finished:
		case <-time.After(stuckGrace):
			stuckRuns.Add(1)
			stuckLive.Add(1)
			go func() { <-finished; stuckLive.Add(-1) }()
			reason := *st.reason.Load()
			reason.Message += " (the bot was stuck in a built-in function and was abandoned)"
			out.res = &Result{Err: &reason}
		}
	}
	if out.err != nil {
		return nil, out.err
	}
	// A cancelled context can also surface first as a failed host call
	// inside the bot; the run failed because it was cancelled, so say so.
	if r := out.res; ctx.Err() != nil && r.Err != nil && r.Err.Limit == "" {
		r.Err = &BotError{Message: "Bot execution cancelled: " + context.Cause(ctx).Error(), Limit: LimitCancelled}
	}
	out.res.Log, out.res.LogTruncated = st.log.result()
	out.res.Elapsed = time.Since(start)
	return out.res, nil
}

// stuckGrace is how long Run waits, after stopping a run, for its runtime to
// notice before abandoning it (a variable so tests can shorten it).
var stuckGrace = time.Second

var stuckRuns atomic.Int64

// stuckLive counts the abandoned runs whose built-in has not returned yet.
var stuckLive atomic.Int64

// StuckRuns is how many runs have been abandoned because a built-in function
// ignored the interrupt; each may still hold a goroutine (and a CPU) until
// that function returns, so a service should report it.
func StuckRuns() int64 { return stuckRuns.Load() }

type runOutcome struct {
	res *Result
	err error
}

// runToResult is the part of Run that touches the runtime; it runs on its
// own goroutine.
func (st *runState) runToResult(pre *goja.Program, p *Program, ev Event, msg *hl7.Message) (out runOutcome) {
	defer func() {
		if r := recover(); r != nil {
			// A Go panic inside goja or a native function is a bug of ours,
			// not the bot's; it must not take the process down.
			out = runOutcome{err: fmt.Errorf("sandbox: panic while running %s: %v", p.name, r)}
		}
	}()
	st.busy()
	defer st.idle()
	res := &Result{}
	v, berr := st.execute(pre, p, ev, msg)
	if berr == nil {
		berr = st.fillResult(res, v)
	}
	if berr != nil {
		res = &Result{Err: berr}
	}
	return runOutcome{res: res}
}

// isHL7 reports whether a Content-Type names HL7 v2 ER7, whatever its
// parameters (docs/API.md: "; charset=utf-8" and the like are ignored).
func isHL7(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), HL7ContentType)
}

// hl7Input is the message behind an HL7 event input.
func hl7Input(in any) (*hl7.Message, error) {
	switch x := in.(type) {
	case *hl7.Message:
		return x, nil
	case string:
		m, err := hl7.Parse(x)
		var tooBig *hl7.LimitError
		switch {
		case errors.As(err, &tooBig):
			return nil, fhir.TooLarge(err.Error())
		case err != nil:
			return nil, fhir.BadRequest(err.Error())
		}
		return m, nil
	case []byte:
		return hl7Input(string(x))
	}
	return nil, fhir.BadRequest(fmt.Sprintf("HL7 input must be text, not %T", in))
}

// timedOut stops the run at its deadline.
func (st *runState) timedOut() {
	st.stop(&BotError{Message: fmt.Sprintf("Bot timed out after %d ms", st.lim.Timeout.Milliseconds()), Limit: LimitTimeout})
}

// stop ends the run for a limit or cancellation; safe from any goroutine.
func (st *runState) stop(e *BotError) {
	st.stopOnce.Do(func() {
		st.reason.Store(e)
		st.vm.Interrupt(e)
		close(st.done)
	})
}

// post hands a function to the loop; safe from any goroutine, never blocks.
func (st *runState) post(f func() error) {
	st.mu.Lock()
	st.posted = append(st.posted, f)
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *runState) execute(pre *goja.Program, p *Program, ev Event, msg *hl7.Message) (goja.Value, *BotError) {
	vm := st.vm
	st.defineGlobals()
	fnv, err := vm.RunProgram(pre)
	if err != nil {
		return nil, st.fail(err)
	}
	setup, _ := goja.AssertFunction(fnv)
	expv, err := setup(goja.Undefined(), st.natives())
	if err != nil {
		return nil, st.fail(err)
	}
	if err := st.takeExports(expv.ToObject(vm)); err != nil {
		return nil, &BotError{Message: err.Error()}
	}

	modv, err := vm.RunProgram(p.prog)
	if err != nil {
		return nil, st.fail(err)
	}
	modFn, ok := goja.AssertFunction(modv)
	if !ok {
		// Source that closes its CommonJS wrapper early parses (Compile
		// wraps, it does not check the seam) and leaves some other value.
		return nil, &BotError{Message: "Bot code is not a CommonJS module: it closes its module wrapper"}
	}
	exports := vm.NewObject()
	module := vm.NewObject()
	_ = module.Set("exports", exports)
	if _, err := modFn(goja.Undefined(), exports, module, st.exp.require); err != nil {
		return nil, st.fail(err)
	}
	var handler goja.Callable
	if o, ok := module.Get("exports").(*goja.Object); ok {
		handler, _ = goja.AssertFunction(o.Get("handler"))
	}
	if handler == nil {
		return nil, &BotError{Message: "Bot code does not export a handler function (exports.handler)"}
	}

	event, err := st.event(ev, msg)
	if err != nil {
		return nil, st.fail(err)
	}
	ret, err := handler(goja.Undefined(), st.exp.medplum, event)
	if err != nil {
		return nil, st.fail(err)
	}
	promise, err := st.promise(ret)
	if err != nil {
		return nil, st.fail(err)
	}
	if berr := st.wait(promise); berr != nil {
		return nil, berr
	}
	if promise.State() == goja.PromiseStateRejected {
		return nil, st.thrown(promise.Result())
	}
	return promise.Result(), nil
}

// promise is the handler's result as a promise: itself when it is one,
// otherwise a promise resolved with it (which adopts a thenable, as await does).
func (st *runState) promise(v goja.Value) (*goja.Promise, error) {
	if o, ok := v.(*goja.Object); ok && o.ClassName() == "Promise" {
		if p, ok := o.Export().(*goja.Promise); ok {
			return p, nil
		}
	}
	p, resolve, _ := st.vm.NewPromise()
	if err := resolve(v); err != nil {
		return nil, err
	}
	return p, nil
}

func (st *runState) takeExports(o *goja.Object) error {
	fn := func(name string) goja.Callable {
		f, _ := goja.AssertFunction(o.Get(name))
		return f
	}
	st.exp = preludeExports{
		medplum:       o.Get("medplum"),
		require:       o.Get("require"),
		hl7FromNative: fn("hl7FromNative"),
		hl7ToString:   fn("hl7ToString"),
		stringify:     fn("stringify"),
		errorInfo:     fn("errorInfo"),
		parse:         fn("parse"),
		isHl7:         fn("isHl7"),
	}
	if st.exp.hl7FromNative == nil || st.exp.stringify == nil || st.exp.isHl7 == nil ||
		st.exp.errorInfo == nil || st.exp.parse == nil || st.exp.hl7ToString == nil {
		return errors.New("sandbox: prelude exports are incomplete")
	}
	return nil
}

// fail turns an error from goja into the reason the run failed.
func (st *runState) fail(err error) *BotError {
	var interrupted *goja.InterruptedError
	var overflow *goja.StackOverflowError
	var ex *goja.Exception
	var be *BotError
	switch {
	case errors.As(err, &interrupted):
		if r := st.reason.Load(); r != nil {
			return r
		}
		return &BotError{Message: "Bot interrupted"}
	case errors.As(err, &overflow):
		return &BotError{Message: fmt.Sprintf("Maximum call stack size exceeded (%d frames)", st.lim.MaxCallDepth), Limit: LimitCallDepth}
	case errors.As(err, &ex):
		return st.thrown(ex.Value())
	case errors.As(err, &be):
		return be
	}
	return &BotError{Message: err.Error()}
}

// thrown describes a value the bot threw or rejected with.
func (st *runState) thrown(v goja.Value) *BotError {
	if r := st.reason.Load(); r != nil {
		return r
	}
	info, err := st.exp.errorInfo(goja.Undefined(), v)
	if err != nil {
		var ex *goja.Exception
		if errors.As(err, &ex) {
			// The bot's error object threw while being described (a hostile
			// getter); fall back to what goja can say without running JS.
			return &BotError{Message: "Unhandled error: " + ex.Error()}
		}
		return st.fail(err)
	}
	o := info.ToObject(st.vm)
	be := &BotError{Message: o.Get("message").String()}
	if s := o.Get("stack"); s != nil && !goja.IsUndefined(s) {
		be.Stack = s.String()
	}
	if oc := o.Get("outcome"); oc != nil && !goja.IsUndefined(oc) {
		var outcome fhir.OperationOutcome
		if json.Unmarshal([]byte(oc.String()), &outcome) == nil {
			be.Outcome = &outcome
		}
	}
	return be
}

// fillResult classifies and serialises what the handler resolved to.
func (st *runState) fillResult(res *Result, v goja.Value) *BotError {
	if v == nil || goja.IsUndefined(v) {
		res.Kind = KindUndefined
		return nil
	}
	if goja.IsNull(v) {
		res.Kind, res.JSON = KindNull, json.RawMessage("null")
		return nil
	}
	if o, ok := v.(*goja.Object); ok {
		isHl7, err := st.exp.isHl7(goja.Undefined(), o)
		if err != nil {
			return st.fail(err)
		}
		if isHl7.ToBoolean() {
			s, err := st.exp.hl7ToString(goja.Undefined(), o)
			if err != nil {
				return st.fail(err)
			}
			res.Kind, res.Text = KindHL7, s.String()
			return st.checkOutput(len(res.Text))
		}
		s, err := st.exp.stringify(goja.Undefined(), o)
		if err != nil {
			return st.fail(err)
		}
		if goja.IsUndefined(s) {
			res.Kind = KindUndefined
			return nil
		}
		text := s.String()
		if berr := st.checkOutput(len(text)); berr != nil {
			return berr
		}
		res.Kind, res.JSON = KindJSON, json.RawMessage(text)
		if rtv := o.Get("resourceType"); rtv != nil {
			if rt, ok := rtv.Export().(string); ok && rt != "" {
				res.Kind, res.ResourceType = KindResource, rt
			}
		}
		return nil
	}
	if _, ok := v.(*goja.Symbol); ok {
		res.Kind = KindUndefined
		return nil
	}
	var kind Kind
	switch v.ExportType().Kind() {
	case reflect.String:
		kind = KindString
	case reflect.Bool:
		kind = KindBoolean
	case reflect.Int64, reflect.Float64, reflect.Pointer: // Pointer: *big.Int for a bigint
		kind = KindNumber
	default: // a symbol
		res.Kind = KindUndefined
		return nil
	}
	res.Kind, res.Text = kind, v.String()
	if berr := st.checkOutput(len(res.Text)); berr != nil {
		return berr
	}
	switch kind {
	case KindString:
		b, _ := json.Marshal(res.Text)
		res.JSON = b
	case KindNumber:
		if s, err := st.exp.stringify(goja.Undefined(), v); err == nil && !goja.IsUndefined(s) {
			res.JSON = json.RawMessage(s.String()) // NaN and Infinity become null, as in JSON.stringify
		} else {
			res.JSON = json.RawMessage(res.Text) // a bigint, which JSON.stringify refuses
		}
	default:
		res.JSON = json.RawMessage(res.Text)
	}
	return nil
}

func (st *runState) checkOutput(n int) *BotError {
	if n > st.lim.MaxOutputBytes {
		return &BotError{Message: fmt.Sprintf("Bot output of %d bytes exceeds the limit of %d bytes", n, st.lim.MaxOutputBytes), Limit: LimitOutput}
	}
	return nil
}

// event builds the handler's second argument.
func (st *runState) event(ev Event, msg *hl7.Message) (*goja.Object, error) {
	vm := st.vm
	o := vm.NewObject()
	set := func(name string, v any) error {
		jv, err := st.toJS(v)
		if err != nil {
			return fmt.Errorf("event.%s: %w", name, err)
		}
		return o.Set(name, jv)
	}
	var input goja.Value
	if msg != nil {
		v, err := st.exp.hl7FromNative(goja.Undefined(), st.hl7MessageToJS(msg))
		if err != nil {
			return nil, err
		}
		input = v
	} else {
		v, err := st.toJS(ev.Input)
		if err != nil {
			return nil, fmt.Errorf("event.input: %w", err)
		}
		input = v
	}
	secrets := ev.Secrets
	if secrets == nil {
		secrets = map[string]any{}
	}
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"bot", ev.Bot}, {"requester", ev.Requester}, {"secrets", secrets}, {"headers", headers}} {
		if err := set(f.name, f.v); err != nil {
			return nil, err
		}
	}
	_ = o.Set("input", input)
	if ev.ContentType != "" {
		_ = o.Set("contentType", ev.ContentType)
	}
	if ev.TraceID != "" {
		_ = o.Set("traceId", ev.TraceID)
	}
	return o, nil
}

// toJS builds plain JavaScript values (not goja's wrappers around Go maps and
// slices, which behave differently from objects a bot would build itself).
func (st *runState) toJS(v any) (goja.Value, error) {
	vm := st.vm
	switch x := v.(type) {
	case nil:
		return goja.Null(), nil
	case string, bool, float64, float32, int, int64, int32, uint, uint64, uint32:
		return vm.ToValue(x), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, err
		}
		return vm.ToValue(f), nil
	case json.RawMessage:
		return st.exp.parse(goja.Undefined(), vm.ToValue(string(x)))
	case map[string]any:
		if x == nil {
			return goja.Undefined(), nil
		}
		o := vm.NewObject()
		// Go maps have no order; sorted keys at least make runs repeatable.
		// Callers that care about the client's key order pass json.RawMessage.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			e, err := st.toJS(x[k])
			if err != nil {
				return nil, err
			}
			_ = o.Set(k, e)
		}
		return o, nil
	case map[string]string:
		o := vm.NewObject()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			_ = o.Set(k, x[k])
		}
		return o, nil
	case []any:
		vals := make([]any, len(x))
		for i, e := range x {
			jv, err := st.toJS(e)
			if err != nil {
				return nil, err
			}
			vals[i] = jv
		}
		return vm.NewArray(vals...), nil
	case []string:
		vals := make([]any, len(x))
		for i, e := range x {
			vals[i] = e
		}
		return vm.NewArray(vals...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return st.exp.parse(goja.Undefined(), vm.ToValue(string(b)))
}
