package sandbox

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// maxConcurrentHostCalls bounds the goroutines one run may keep busy on the
// host; further calls queue in the run (in JS memory, which the memory guard
// watches) until a slot frees.
const maxConcurrentHostCalls = 8

// maxTimers bounds the timers one run may have pending at once.
const maxTimers = 10000

// errNeverSettles is reported when the handler's promise is pending with
// nothing left that could settle it.
var errNeverSettles = &BotError{Message: "Bot handler returned a promise that never settles (no pending timers or requests)"}

// wait runs the event loop until the promise settles or the run is stopped.
// Timers and host answers run one at a time on this goroutine; promise
// reactions run when each of those calls returns to Go. Whatever is still
// pending when the promise settles is abandoned with the runtime.
func (st *runState) wait(p *goja.Promise) *BotError {
	var clock *time.Timer
	defer func() {
		if clock != nil {
			clock.Stop()
		}
	}()
	for p.State() == goja.PromiseStatePending {
		select {
		case <-st.done:
			return st.reason.Load()
		default:
		}
		if jobs := st.takePosted(); len(jobs) > 0 {
			for _, job := range jobs {
				if err := job(); err != nil {
					return st.fail(err)
				}
			}
			continue
		}
		now := time.Now()
		if !now.Before(st.deadline) {
			// The deadline's own stop may be a moment late: a timer clamped
			// to the deadline must not fire first.
			st.timedOut()
			return st.reason.Load()
		}
		if len(st.timers) > 0 && !st.timers[0].when.After(now) {
			if berr := st.fire(heap.Pop(&st.timers).(*timer)); berr != nil {
				return berr
			}
			continue
		}
		if len(st.timers) == 0 && st.hostPending == 0 {
			return errNeverSettles
		}
		var tick <-chan time.Time
		if len(st.timers) > 0 {
			d := st.timers[0].when.Sub(now)
			if clock == nil {
				clock = time.NewTimer(d)
			} else {
				clock.Reset(d)
			}
			tick = clock.C
		}
		st.idle()
		select {
		case <-st.wake:
		case <-tick:
		case <-st.done:
			return st.reason.Load()
		}
		st.busy()
		if clock != nil && !clock.Stop() {
			select {
			case <-clock.C:
			default:
			}
		}
	}
	return nil
}

// busy and idle bracket the time this run's goroutine can be executing
// JavaScript, which is the only time it can allocate on its own account; the
// memory guard uses it to tell an allocating run from one waiting on I/O.
func (st *runState) busy() { st.busySince.Store(time.Now().UnixNano()) }

func (st *runState) idle() {
	if since := st.busySince.Swap(0); since != 0 {
		st.busyTotal.Add(time.Now().UnixNano() - since)
	}
}

// busyTime is how long the run has spent outside its event-loop waits.
func (st *runState) busyTime(now int64) time.Duration {
	d := st.busyTotal.Load()
	if since := st.busySince.Load(); since != 0 && now > since {
		d += now - since
	}
	return time.Duration(d)
}

func (st *runState) takePosted() []func() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	jobs := st.posted
	st.posted = nil
	return jobs
}

// timer is one setTimeout or setInterval.
type timer struct {
	id       int64
	seq      int64 // creation order, so timers due at the same instant run in order
	when     time.Time
	every    time.Duration // >0 for setInterval
	fn       goja.Callable
	args     []goja.Value
	heapSlot int
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapSlot, h[j].heapSlot = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.heapSlot = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.heapSlot = -1
	return t
}

func (st *runState) fire(t *timer) *BotError {
	if t.every > 0 {
		st.timerSeq++
		t.seq = st.timerSeq
		t.when = time.Now().Add(t.every)
		heap.Push(&st.timers, t)
	} else {
		delete(st.timerByID, t.id)
	}
	if _, err := t.fn(goja.Undefined(), t.args...); err != nil {
		// Node ends the process on an exception thrown by a timer callback;
		// the equivalent here is failing the run with it.
		return st.fail(err)
	}
	return nil
}

// setTimer implements setTimeout, setInterval (repeat) and setImmediate
// (delay nil); arguments after the delay are passed to the callback, as in Node.
func (st *runState) setTimer(call goja.FunctionCall, repeat bool, delay goja.Value) goja.Value {
	fn, ok := goja.AssertFunction(call.Argument(0))
	if !ok {
		panic(st.vm.NewTypeError(`The "callback" argument must be of type function`))
	}
	var args []goja.Value
	if delay != nil && len(call.Arguments) > 2 {
		args = append(args, call.Arguments[2:]...)
	} else if delay == nil && len(call.Arguments) > 1 {
		args = append(args, call.Arguments[1:]...)
	}
	if len(st.timerByID) >= maxTimers {
		panic(st.vm.NewTypeError(fmt.Sprintf("too many pending timers (limit %d)", maxTimers)))
	}
	ms := 0.0
	if delay != nil {
		ms = delay.ToFloat()
	}
	if math.IsNaN(ms) || ms < 0 {
		ms = 0
	}
	ms = min(ms, float64(st.lim.Timeout.Milliseconds())+1)
	d := time.Duration(ms * float64(time.Millisecond))
	st.timerSeq++
	t := &timer{id: st.timerSeq, seq: st.timerSeq, when: time.Now().Add(d), fn: fn, args: args}
	if repeat {
		t.every = max(d, time.Millisecond) // as Node: an interval of 0 still yields
	}
	st.timerByID[t.id] = t
	heap.Push(&st.timers, t)
	return st.vm.ToValue(t.id)
}

func (st *runState) clearTimer(call goja.FunctionCall) goja.Value {
	id := call.Argument(0).ToInteger()
	if t, ok := st.timerByID[id]; ok {
		delete(st.timerByID, id)
		if t.heapSlot >= 0 {
			heap.Remove(&st.timers, t.heapSlot)
		}
	}
	return goja.Undefined()
}

// hostCall is one medplum request waiting for, or holding, a goroutine.
type hostCall struct {
	method, path, contentType string
	body                      []byte
	resolve                   func(any) error
}

func (st *runState) request(call goja.FunctionCall) goja.Value {
	hc := hostCall{
		method:      call.Argument(0).String(),
		path:        call.Argument(1).String(),
		contentType: call.Argument(3).String(),
	}
	if b := call.Argument(2); !goja.IsUndefined(b) && !goja.IsNull(b) {
		hc.body = []byte(b.String())
	}
	p, resolve, _ := st.vm.NewPromise()
	hc.resolve = resolve
	st.hostPending++
	if st.hostActive < maxConcurrentHostCalls {
		st.startHost(hc)
	} else {
		st.hostQueue = append(st.hostQueue, hc)
	}
	return st.vm.ToValue(p)
}

// startHost makes the blocking Host.Request off the JS goroutine and posts
// the answer back to the loop; the promise always resolves (with the status),
// and the prelude turns a non-2xx status into a rejection.
func (st *runState) startHost(hc hostCall) {
	st.hostActive++
	go func() {
		status, respType, body, err := 0, "", []byte(nil), error(nil)
		if st.host == nil {
			err = fhir.Unavailable("No FHIR API is available to this bot")
		} else {
			status, respType, body, err = st.host.Request(st.ctx, hc.method, hc.path, hc.body, hc.contentType)
		}
		if err != nil {
			fe := fhir.Internal()
			var e *fhir.Error
			if errors.As(err, &e) {
				fe = e
			}
			status, respType, body = fe.Status, "application/fhir+json", fe.JSON()
		}
		st.post(func() error {
			st.hostActive--
			st.hostPending--
			if len(st.hostQueue) > 0 {
				next := st.hostQueue[0]
				st.hostQueue = st.hostQueue[1:]
				st.startHost(next)
			}
			o := st.vm.NewObject()
			_ = o.Set("status", status)
			_ = o.Set("contentType", respType)
			_ = o.Set("body", string(body))
			return hc.resolve(o)
		})
	}()
}

// logBuffer is the captured console output, capped. It is locked because an
// abandoned run may still be writing while Run reads it.
type logBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	max     int
	dropped int
}

func (l *logBuffer) room() int { return l.max - l.b.Len() }

func (l *logBuffer) write(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.room()
	if len(s)+1 <= room {
		l.b.WriteString(s)
		l.b.WriteByte('\n')
		return
	}
	if room > 0 {
		cut := room
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		l.b.WriteString(s[:cut])
		l.dropped += len(s) + 1 - cut
		return
	}
	l.dropped += len(s) + 1
}

func (l *logBuffer) result() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped == 0 {
		return l.b.String(), false
	}
	return l.b.String() + fmt.Sprintf("\n... [log truncated at %d bytes]\n", l.max), true
}

func (st *runState) consoleLog(call goja.FunctionCall) goja.Value {
	arg := call.Argument(0)
	// Only what fits is converted: a bot logging a huge string should not
	// make us copy it.
	st.log.mu.Lock()
	room := st.log.room()
	st.log.mu.Unlock()
	if s, ok := arg.(goja.String); ok && s.Length() > room+1 {
		arg = s.Substring(0, max(room, 0)+1)
	}
	st.log.write(arg.String())
	return goja.Undefined()
}
