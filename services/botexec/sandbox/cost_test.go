package sandbox

import (
	"context"
	"runtime"
	"testing"
)

// What a warm run of an echo bot allocates is the fresh runtime it gets:
// the prelude and the built-ins it touches. Most of a bot worker's CPU is
// building and collecting that, so the bound is kept: the prelude captures
// its intrinsics without touching built-ins a bot may never use (Reflect,
// the iterator prototypes), which was 16 KB of the 154 KB a run took.
func TestEchoRunAllocates(t *testing.T) {
	const maxBytes = 145_000
	p := mustCompile(t, echoBot)
	ev := Event{Input: "hello world", ContentType: "text/plain"}
	ctx := context.Background()
	run := func() {
		res, err := Run(ctx, p, ev, nil, Limits{})
		if err != nil || res.Err != nil || res.Text != "hello world" {
			t.Fatalf("%v %+v", err, res)
		}
	}
	for range 20 {
		run()
	}
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		run()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > maxBytes {
		t.Errorf("a warm echo run allocates %d bytes, want at most %d", per, maxBytes)
	}
}
