package subscriptions

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
)

func TestKeyedRunnerKeepsOrderPerKey(t *testing.T) {
	k := newKeyedRunner(4)
	var mu sync.Mutex
	seen := map[string][]int{}
	var running, most atomic.Int32
	for i := 0; i < 200; i++ {
		key := []string{"a", "b", "c", "d", "e", "f"}[i%6]
		k.run(key, func() {
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond) // work that takes a while, so runs of other keys overlap: not a wait
			mu.Lock()
			seen[key] = append(seen[key], i)
			mu.Unlock()
			running.Add(-1)
		})
	}
	k.wait()
	total := 0
	for key, order := range seen {
		total += len(order)
		for j := 1; j < len(order); j++ {
			if order[j] < order[j-1] {
				t.Fatalf("key %s ran %d after %d", key, order[j], order[j-1])
			}
		}
	}
	if total != 200 {
		t.Fatalf("%d of 200 ran", total)
	}
	if m := most.Load(); m > 4 {
		t.Fatalf("%d ran at once, want at most 4", m)
	}
}

func TestRetryDelay(t *testing.T) {
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: 2 * time.Second, 4: 16 * time.Second, 17: maxRetryDelay, 40: maxRetryDelay} {
		if got := retryDelay(attempt); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", attempt, got, want)
		}
	}
}

func TestHookBodyAndHeaders(t *testing.T) {
	res := &repo.Resource{Type: "Patient", ID: "p1", JSON: []byte(`{"resourceType":"Patient","id":"p1"}`)}
	if got := string(hookBody(subscription.Update, res, false)); got != string(res.JSON) {
		t.Errorf("update body %s", got)
	}
	if got := string(hookBody(subscription.Delete, res, false)); got != "{}" {
		t.Errorf("rest-hook delete body %s, want {}", got)
	}
	if got := string(hookBody(subscription.Delete, res, true)); got != `{"deletedResource":{"resourceType":"Patient","id":"p1"}}` {
		t.Errorf("bot delete input %s", got)
	}
	sub, err := subscription.Parse("s1", "proj", []byte(`{"resourceType":"Subscription","status":"active","criteria":"Patient",
		"channel":{"type":"rest-hook","endpoint":"https://x.example","header":["X-Medplum-Interaction: forged"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	d := &delivery{Subscription: "s1", Event: repo.Event{Op: subscription.Delete, Type: "Patient", ID: "p1"}}
	h := hookHeaders(d, sub, []byte("{}"))
	if h.Get("X-Medplum-Deleted-Resource") != "Patient/p1" || h.Get("X-Signature") != "" {
		t.Errorf("headers %v", h)
	}
	// A channel header may set any header, as in Medplum, the interaction
	// included: the signature is what a receiver should trust.
	if h.Get("X-Medplum-Interaction") != "forged" {
		t.Errorf("channel header not applied: %v", h)
	}
}

// A project alone takes workers until only a share is left free; then
// each project takes up to its share, and a release makes room again.
func TestShares(t *testing.T) {
	p := newShares(8, 2)
	for i := 0; i < 6; i++ {
		if !p.take("a") {
			t.Fatalf("take %d of 6 refused to a project alone", i+1)
		}
	}
	if p.take("a") {
		t.Fatal("a project over its share took one of the last free workers")
	}
	for i := 0; i < 2; i++ {
		if !p.take("b") {
			t.Fatalf("another project's take %d of its share of 2 refused", i+1)
		}
	}
	if p.take("b") {
		t.Fatal("another project took more than its share with none free")
	}
	p.release("a")
	if p.take("a") {
		t.Fatal("a project over its share took a freed worker while others need theirs")
	}
	if !p.take("c") {
		t.Fatal("a third project refused a free worker")
	}
	p.release("b")
	p.release("b")
	if _, kept := p.held["b"]; kept {
		t.Fatal("a project with nothing held is still counted")
	}
}
