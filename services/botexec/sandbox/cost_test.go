package sandbox

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
)

// What a warm run of an echo bot allocates is the fresh runtime it gets:
// the prelude and the built-ins it touches. Most of a bot worker's CPU is
// building and collecting that, so the bounds are kept: the prelude
// captures its intrinsics without touching built-ins a bot may never use
// (Reflect, the iterator prototypes: 16 KB of the 154 KB a text echo took),
// and measuring a result before JSON.stringify takes each object's own keys
// without walking (and building) Object.prototype, nor an argument array
// per step (17 KB of the 174 KB a JSON echo took).
func TestEchoRunAllocates(t *testing.T) {
	cases := []struct {
		name     string
		ev       Event
		want     string
		maxBytes uint64
	}{
		{"text", Event{Input: "hello world", ContentType: "text/plain"}, "hello world", 145_000},
		{"JSON", Event{Input: json.RawMessage(`{"resourceType":"Patient","id":"123","name":[{"given":["Alice"],"family":"Smith"}],"birthDate":"1970-01-01"}`),
			ContentType: "application/fhir+json"}, `{"resourceType":"Patient","id":"123","name":[{"given":["Alice"],"family":"Smith"}],"birthDate":"1970-01-01"}`, 165_000},
	}
	p := mustCompile(t, echoBot)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := func() {
				res, err := Run(ctx, p, tc.ev, nil, Limits{})
				if err != nil || res.Err != nil || (res.Text != tc.want && string(res.JSON) != tc.want) {
					t.Fatalf("%v %+v", err, res)
				}
			}
			for range 20 {
				run()
			}
			// MemStats counts the whole process: whatever other goroutines
			// allocate meanwhile (another test's leftovers under -count)
			// only adds, so the least of a few rounds is the run's own.
			const rounds, n = 5, 50
			per := uint64(1 << 62)
			for range rounds {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range n {
					run()
				}
				runtime.ReadMemStats(&after)
				per = min(per, (after.TotalAlloc-before.TotalAlloc)/n)
			}
			if per > tc.maxBytes {
				t.Errorf("a warm echo run allocates %d bytes, want at most %d", per, tc.maxBytes)
			}
		})
	}
}
