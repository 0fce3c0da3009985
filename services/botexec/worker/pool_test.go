package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

// soloPool has one worker, so that a test knows which process ran its bot;
// the tests that end its worker share it.
var soloPool = sync.OnceValues(func() (*Pool, error) {
	return New(Config{Workers: 1, MemoryBytes: workerBudget})
})

func solo(t *testing.T) *Pool {
	t.Helper()
	p, err := soloPool()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// liveWorker is the pool's first worker once it is running (a replaced
// one starts in the background).
func liveWorker(t *testing.T, p *Pool) *proc {
	t.Helper()
	var pr *proc
	eventually(t, "a live worker", func() bool { pr = p.slots[0].current(); return pr != nil })
	return pr
}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after 10 s (testenv.WaitLimit; this package's tests, which
// run as the workers too, do without testenv's NATS and store).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(pause)
	}
}

var keySeq atomic.Int64

// uniqueKey is a program key no worker has seen.
func uniqueKey() string {
	return "test/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/" + strconv.FormatInt(keySeq.Add(1), 10)
}

func runJob(t *testing.T, p *Pool, j *Job) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.Run(ctx, j)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func TestPoolSendsCodeOnce(t *testing.T) {
	p := solo(t)
	j, codeCalls := countedJob(uniqueKey(), nil)
	j.InputKind = InputText
	for i := 0; i < 3; i++ {
		if res := runJob(t, p, j); res.Err != nil || res.Text != "in" {
			t.Fatalf("run %d: %+v %v", i, res, res.Err)
		}
	}
	if n := codeCalls.Load(); n != 1 {
		t.Errorf("Code called %d times for three runs, want 1", n)
	}
	// A program compiled under a key runs without its code being asked for.
	key := uniqueKey()
	if _, err := p.Compile(context.Background(), "Bot/c", key, "export const handler = async (m: unknown, e: {input: string}) => e.input.toUpperCase();", "bot.ts"); err != nil {
		t.Fatal(err)
	}
	j, codeCalls = countedJob(key, errors.New("no code: it was compiled"))
	j.InputKind = InputText
	if res := runJob(t, p, j); res.Err != nil || res.Text != "IN" || codeCalls.Load() != 0 {
		t.Errorf("after Compile: %+v %v, Code called %d times", res, res.Err, codeCalls.Load())
	}
}

func TestPoolFaults(t *testing.T) {
	codeErr := errors.New("Binary/1 is gone")
	tests := []struct {
		name  string
		job   func() *Job
		check func(error) bool
		want  string
	}{
		{"malformed HL7 is a 400", func() *Job {
			j := job(echo, "PID|1")
			j.InputKind, j.Event.ContentType = InputHL7, sandbox.HL7ContentType
			return j
		}, isStatus(400, "hl7: segment 1, column 1 (offset 0): message must start with an MSH segment"), "400"},
		{"code that does not compile is a 400", func() *Job { return job("exports.handler = ;", "") },
			isStatus(400, "Syntax error at line 1, column 19 of test.js: Unexpected token ;"), "400"},
		{"code that cannot be had", func() *Job {
			j := job(echo, "")
			j.Key, j.Code = uniqueKey(), func() (string, error) { return "", codeErr }
			return j
		}, func(err error) bool { return errors.Is(err, codeErr) }, "the Code error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := pool(t).Run(context.Background(), tt.job())
			if res != nil || !tt.check(err) {
				t.Errorf("got %+v, %v; want %s", res, err, tt.want)
			}
		})
	}
}

func isStatus(status int, message string) func(error) bool {
	return func(err error) bool {
		var fe *fhir.Error
		return errors.As(err, &fe) && fe.Status == status && fe.Message() == message
	}
}

// Results cross the pipes whole: each kind, with its text and JSON.
func TestPoolResults(t *testing.T) {
	tests := []struct {
		name string
		ret  string
		kind sandbox.Kind
		text string
		json string
	}{
		{"undefined", `undefined`, sandbox.KindUndefined, "", ""},
		{"null", `null`, sandbox.KindNull, "", "null"},
		{"string with bytes JSON escapes", `'a"\u0000\n'`, sandbox.KindString, "a\"\x00\n", `"a\"\u0000\n"`},
		{"resource keeps key order", `({resourceType: 'Patient', z: 1, a: 2})`, sandbox.KindResource, "", `{"resourceType":"Patient","z":1,"a":2}`},
		{"HL7", `Hl7Message.parse('MSH|^~\\&|A\rPID|1')`, sandbox.KindHL7, "MSH|^~\\&|A\rPID|1", ""},
		{"bigint", `2n ** 64n`, sandbox.KindNumber, "18446744073709551616", "18446744073709551616"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, `exports.handler = async () => `+tt.ret+`;`, "")
			if res.Err != nil || res.Kind != tt.kind || res.Text != tt.text || string(res.JSON) != tt.json {
				t.Errorf("got %v %q %q (%v); want %v %q %q", res.Kind, res.Text, res.JSON, res.Err, tt.kind, tt.text, tt.json)
			}
		})
	}
	t.Run("the log and the bot's error", func(t *testing.T) {
		res := run(t, `exports.handler = async () => { console.log('x'.repeat(50)); throw new OperationOutcomeError({resourceType: 'OperationOutcome', id: 'forbidden', issue: [{severity: 'error', code: 'forbidden', details: {text: 'No'}}]}) };`, "")
		if res.Err == nil || res.Err.Message != "No" || res.Err.Outcome == nil || res.Err.Outcome.ID != "forbidden" || res.Err.Stack == "" || res.Log != "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n" {
			t.Errorf("got %+v, log %q", res.Err, res.Log)
		}
	})
}

// A bot's medplum calls are made by the parent's Host; its failures reach
// the bot as outcomes, and only a *fhir.Error says more than "Internal".
func TestPoolHostErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a *fhir.Error", fhir.Conflict("version mismatch"), "version mismatch conflict"},
		{"anything else", errors.New("dial tcp 10.0.0.7:4222: connection refused"), "Internal server error exception"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := job(`exports.handler = async (m) => { try { await m.readResource('Patient', '1') } catch (e) { return e.message + ' ' + e.outcome.issue[0].code } };`, "")
			j.Host = &recordingHost{respond: func() (int, string, []byte, error) { return 0, "", nil, tt.err }}
			if res := runJob(t, pool(t), j); res.Err != nil || res.Text != tt.want {
				t.Errorf("got %q (%v), want %q", res.Text, res.Err, tt.want)
			}
		})
	}
}

// blockingHost tells when a bot's call arrives and holds it until release.
type blockingHost struct {
	arrived chan struct{}
	once    sync.Once
	release chan struct{}
}

func (h *blockingHost) Request(ctx context.Context, method, path string, body []byte, ct string) (int, string, []byte, error) {
	h.once.Do(func() { close(h.arrived) })
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return 200, "application/fhir+json", []byte(`{}`), nil
}

// A worker that dies fails the run it held at once; the next run goes to a
// new worker.
func TestWorkerDiesMidRun(t *testing.T) {
	p := solo(t)
	victim := liveWorker(t, p)
	host := &blockingHost{arrived: make(chan struct{}), release: make(chan struct{})}
	defer close(host.release)
	j := job(`exports.handler = async (m) => { await m.readResource('Patient', '1'); return 'survived' };`, "")
	j.Host, j.Limits.Timeout = host, 30*time.Second
	out := make(chan outcome, 1)
	go func() {
		res, err := p.Run(context.Background(), j)
		out <- outcome{res: res, err: err}
	}()
	select {
	case <-host.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the bot did not call the host")
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-out:
		if o.err != nil || o.res.Err == nil || o.res.Err.Limit != sandbox.LimitWorker || o.res.Err.Message != "Bot run ended: its worker process stopped (killed)" {
			t.Errorf("got %+v, %v", o.res, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not answered when its worker died")
	}
	if res := runJob(t, p, job(echo, "next")); res.Err != nil || res.Text != "next" {
		t.Fatalf("next run: %+v %v", res, res.Err)
	}
	if w := liveWorker(t, p); w == victim || w.cmd.Process.Pid == victim.cmd.Process.Pid {
		t.Error("the next run went to the dead worker")
	}
}

func TestPoolClosed(t *testing.T) {
	p, err := New(Config{Workers: 1, MemoryBytes: workerBudget})
	if err != nil {
		t.Fatal(err)
	}
	pr := liveWorker(t, p)
	p.Close()
	select {
	case <-pr.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not end after Close")
	}
	if r := pr.endReason(); r != "stopped" {
		t.Errorf("end reason %q", r)
	}
	_, err = p.Run(context.Background(), job(echo, "x"))
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status != 503 || fe.Message() != "No bot worker is available, try again" || fe.Header["Retry-After"] != "1" {
		t.Errorf("Run after Close: %v", err)
	}
	if _, err := p.Compile(context.Background(), "Bot/x", "", echo, "bot.js"); !errors.As(err, &fe) || fe.Status != 503 {
		t.Errorf("Compile after Close: %v", err)
	}
}

func TestNewRefusesInsideAWorker(t *testing.T) {
	t.Setenv(envWorker, "1")
	p, err := New(Config{})
	if p != nil || err == nil || err.Error() != "bot worker: this process was started as a worker but its main did not call worker.MainIfWorker" {
		t.Errorf("New = %v, %v", p, err)
	}
}

func TestChildMainRefusesABadBudget(t *testing.T) {
	if code := childMain("lots"); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
}
