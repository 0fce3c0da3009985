package worker

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/rss"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

func TestMain(m *testing.M) {
	MainIfWorker()
	os.Exit(m.Run())
}

// workerBudget is each test worker's address space beyond the runtime's:
// small, so that hostile bots reach it quickly.
const workerBudget = 768 << 20

var testPool = sync.OnceValues(func() (*Pool, error) {
	return New(Config{Workers: 2, MemoryBytes: workerBudget})
})

func pool(t *testing.T) *Pool {
	t.Helper()
	p, err := testPool()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noHost answers every medplum call with 404.
type noHost struct{}

func (noHost) Request(ctx context.Context, method, path string, body []byte, ct string) (int, string, []byte, error) {
	return 404, "application/fhir+json", []byte(`{"resourceType":"OperationOutcome","id":"not-found","issue":[]}`), nil
}

var keys sync.Map

func job(code string, input string) *Job {
	// One key per source, as the Binary version would be.
	k, _ := keys.LoadOrStore(code, "test/"+time.Now().Format(time.RFC3339Nano))
	return &Job{
		Key: k.(string), Name: "test.js",
		Code:  func() (string, error) { return code, nil },
		Event: sandbox.Event{ContentType: "text/plain"},
		Input: []byte(input), InputKind: InputText,
		Limits: sandbox.Limits{Timeout: 2 * time.Second, MemoryBytes: 64 << 20},
		Host:   noHost{},
	}
}

func run(t *testing.T, code, input string) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := pool(t).Run(ctx, job(code, input))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

const echo = `exports.handler = async (medplum, event) => event.input;`

func TestEcho(t *testing.T) {
	res := run(t, echo, "hello")
	if res.Err != nil || res.Kind != sandbox.KindString || res.Text != "hello" {
		t.Fatalf("%+v %+v", res, res.Err)
	}
	// JSON input and output, and a medplum call answered by the parent.
	ctx := context.Background()
	j := job(`exports.handler = async (medplum, event) => {
		let status = 0;
		try { await medplum.readResource('Patient', 'x'); } catch (e) { status = e.outcome ? 404 : -1; }
		return { echo: event.input, status };
	};`, `{"a":[1,2,{"b":"c"}]}`)
	j.InputKind = InputJSON
	res, err := pool(t).Run(ctx, j)
	if err != nil || res.Err != nil {
		t.Fatalf("%v %+v", err, res)
	}
	var v map[string]any
	if err := json.Unmarshal(res.JSON, &v); err != nil || v["status"] != float64(404) {
		t.Fatalf("%s", res.JSON)
	}
}

// Every way a bot can exhaust memory or stack, nest without end, or never
// stop is contained: the bot fails, this process (standing for the API
// server) neither dies nor grows, and the next run works.
func TestHostileBots(t *testing.T) {
	cases := []struct {
		name, code string
		want       []sandbox.Limit // any of these; empty: the bot's own error is fine
	}{
		{"huge ArrayBuffer", `exports.handler = async () => new ArrayBuffer(2 ** 31).byteLength;`, nil},
		{"huge typed array", `exports.handler = async () => new Float64Array(4e8).length;`, nil},
		{"many typed arrays", `exports.handler = async () => { const k = []; for (;;) k.push(new Uint8Array(1 << 24)); };`, nil},
		{"growing arrays", `exports.handler = async () => { const k = []; for (;;) k.push(new Array(1e5).fill(1.5)); };`, nil},
		{"growing strings", `exports.handler = async () => { let s = 'x'; for (;;) s += s; };`, nil},
		{"string repeat", `exports.handler = async () => 'x'.repeat(2 ** 30).length;`, nil},
		{"nested JSON.parse", `exports.handler = async () => JSON.parse('['.repeat(5e6) + ']'.repeat(5e6));`, nil},
		{"nested eval", `exports.handler = async () => eval('('.repeat(3e6) + '1' + ')'.repeat(3e6));`, nil},
		{"nested eval of unary ops", `exports.handler = async () => eval('-'.repeat(3e6) + '1');`, nil},
		{"deep array toString", `exports.handler = async () => { let a = []; for (let i = 0; i < 3e6; i++) a = [a]; return String(a); };`, nil},
		{"deep object stringify", `exports.handler = async () => { let a = {}; for (let i = 0; i < 3e6; i++) a = {a}; return JSON.stringify(a).length; };`, nil},
		{"exponential toJSON", `exports.handler = async () => { let x = ['leaf']; for (let i = 0; i < 60; i++) x = [x, x]; return { toJSON() { return x; } }; };`, nil},
		{"exponential result", `exports.handler = async () => { let x = {v: 'leaf'}; for (let i = 0; i < 60; i++) x = {a: x, b: x}; return x; };`, nil},
		{"recursion", `function f(n) { return f(n + 1) + 1; } exports.handler = async () => f(0);`, []sandbox.Limit{sandbox.LimitCallDepth}},
		{"busy loop", `exports.handler = async () => { for (;;) {} };`, []sandbox.Limit{sandbox.LimitTimeout}},
		{"timers without end", `exports.handler = () => new Promise(() => { setInterval(() => { for (let i = 0; i < 1e5; i++); }, 0); });`, []sandbox.Limit{sandbox.LimitTimeout}},
		{"promise that never settles", `exports.handler = () => new Promise(() => {});`, nil},
		{"catastrophic regexp", `exports.handler = async () => { for (;;) /^(a+)+$/.test('a'.repeat(40) + 'b'); };`, []sandbox.Limit{sandbox.LimitTimeout}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stop := rss.Watch(nil)
			start := time.Now()
			res := run(t, tc.code, "")
			grew := stop()
			if res.Err == nil {
				t.Fatalf("the bot succeeded: %q %s", res.Text, res.JSON)
			}
			t.Logf("%v in %v (%s), this process grew %d MiB", res.Err.Message, time.Since(start).Round(time.Millisecond), res.Err.Limit, grew>>20)
			if len(tc.want) > 0 && !containsLimit(tc.want, res.Err.Limit) {
				t.Errorf("stopped by %q, want one of %v", res.Err.Limit, tc.want)
			}
			if grew > 64<<20 {
				t.Errorf("this process grew by %d MiB", grew>>20)
			}
			// The pool still runs bots.
			if res := run(t, echo, "after"); res.Err != nil || res.Text != "after" {
				t.Fatalf("next run: %+v %v", res, res.Err)
			}
		})
	}
}

func containsLimit(ls []sandbox.Limit, l sandbox.Limit) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}

// Deployed code that nests too deeply for the transpiler or the parser is
// refused, and the worker that tried is replaced.
func TestCompileHostileSource(t *testing.T) {
	ctx := context.Background()
	for name, src := range map[string]string{
		"brackets":  "exports.handler = async () => " + strings.Repeat("[", 2e6) + strings.Repeat("]", 2e6) + ";",
		"parens":    "exports.handler = async () => " + strings.Repeat("(", 2e6) + "1" + strings.Repeat(")", 2e6) + ";",
		"unary ops": "exports.handler = async () => " + strings.Repeat("!", 2e6) + "1;",
	} {
		t.Run(name, func(t *testing.T) {
			stop := rss.Watch(nil)
			_, err := pool(t).Compile(ctx, "deep.ts", "", src, "deep.ts")
			grew := stop()
			t.Logf("%v; this process grew %d MiB", err, grew>>20)
			if err == nil {
				t.Fatal("compiled")
			}
			if grew > 64<<20 {
				t.Errorf("this process grew by %d MiB", grew>>20)
			}
		})
	}
	js, err := pool(t).Compile(ctx, "ok.ts", "", "export async function handler(m: unknown, e: {input: string}) { return e.input; }", "ok.ts")
	if err != nil || !strings.Contains(js, "handler") {
		t.Fatalf("%v %q", err, js)
	}
}

// A cancelled run stops and is answered promptly.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := pool(t).Run(ctx, job(`exports.handler = async () => { for (;;) {} };`, ""))
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || res.Err.Limit != sandbox.LimitCancelled || time.Since(start) > 2*time.Second {
		t.Fatalf("%+v after %v", res.Err, time.Since(start))
	}
}
