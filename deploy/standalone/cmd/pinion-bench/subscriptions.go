package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/services/botexec/subscriptions"
)

// subscriptions measures what Subscriptions cost and how fast they deliver
// (issue 19):
//
//   - what a write costs its writer with 10 matching rest-hook
//     subscriptions against none (one paced client, so the deliveries do
//     not take the CPU the writer would use);
//   - the time from a committed write to the start of its bot's run, at 16
//     writers paced below what the bots sustain (in-process only: read from
//     the stack's pinion_subscription_latency_seconds histogram);
//   - 16 writers unpaced with one bot subscription: the write and delivery
//     rates, and the backlog left when the writers stop.
func (b *bench) subscriptions() {
	var hooked atomic.Int64
	hooks, stop := serveHooks(func(w http.ResponseWriter, r *http.Request) {
		hooked.Add(1)
		w.WriteHeader(200)
	})
	defer stop()
	hookURL := hooks + "/hook"
	body := func(family string) []byte {
		p := patientBody(0)
		p["name"] = []any{map[string]any{"given": []any{"Sub"}, "family": family}}
		j, _ := json.Marshal(p)
		return j
	}
	var writes atomic.Int64 // warm-up included
	post := func(j []byte) bool {
		st, _ := b.hc.do("POST", b.base+"fhir/R4/Patient", b.token, "application/fhir+json", j)
		writes.Add(1)
		return st == 201
	}

	// The writer's cost: none matching, then ten.
	const pace = 50 // writes a second, one client
	plain := body("Subplain")
	paced("POST Patient, no subscription (1 client, 50/s)", 1, pace, func(int, int) bool { return post(plain) })
	for i := 0; i < 10; i++ {
		b.subscribe("Patient?name=subhook", hookURL)
	}
	matched := body("Subhook")
	// First with the deliveries held back (the matcher's consumer paused):
	// the write path's own cost, as when botexec runs on other nodes; then
	// with them made on the same cores as the writer.
	if b.inProcess {
		resume := b.holdDeliveries()
		before, w0 := hooked.Load(), writes.Load()
		paced("POST Patient, 10 subscriptions held (1 client, 50/s)", 1, pace, func(int, int) bool { return post(matched) })
		n := writes.Load() - w0
		resume()
		drained := waitFor(func() bool { return hooked.Load()-before >= 10*n }, 60*time.Second)
		fmt.Printf("%-44s %d rest-hook calls for %d writes once released (all made: %v)\n", "  deliveries", hooked.Load()-before, n, drained)
	}
	before, w0 := hooked.Load(), writes.Load()
	paced("POST Patient, 10 subscriptions (1 client, 50/s)", 1, pace, func(int, int) bool { return post(matched) })
	n := writes.Load() - w0
	drained := waitFor(func() bool { return hooked.Load()-before >= 10*n }, 30*time.Second)
	fmt.Printf("%-44s %d rest-hook calls for %d writes (all made: %v)\n", "  deliveries", hooked.Load()-before, n, drained)

	// Commit to bot start, paced.
	bot := b.newBot("subscribed", "", `exports.handler = async () => {};`)
	b.subscribe("Patient?name=subbot", "Bot/"+bot)
	botted := body("Subbot")
	for _, rate := range []int{100, 400} {
		lat0, ok0, w0 := latencyHistogram(), botDeliveries(), writes.Load()
		paced(fmt.Sprintf("POST Patient → bot (16 clients, %d/s)", rate), *clients, rate, func(int, int) bool { return post(botted) })
		n := float64(writes.Load() - w0)
		waitFor(func() bool { return botDeliveries()-ok0 >= n }, 60*time.Second)
		b.printLatency(fmt.Sprintf("  commit → bot start at %d/s", rate), lat0)
	}

	// Unpaced: does delivery keep up?
	ok0, w0 := botDeliveries(), writes.Load()
	t0 := time.Now()
	drive("POST Patient → bot (16 clients, unpaced)", *clients, func(int, int) bool { return post(botted) })
	writeEnd := time.Since(t0)
	n = writes.Load() - w0
	backlog := float64(n) - (botDeliveries() - ok0)
	waitFor(func() bool { return botDeliveries()-ok0 >= float64(n) }, 120*time.Second)
	all := time.Since(t0)
	if b.inProcess {
		fmt.Printf("%-44s %9.0f runs/s  backlog %0.f when the writers stopped, drained %.1f s later\n",
			"  bot runs from subscriptions", (botDeliveries()-ok0)/all.Seconds(), backlog, (all - writeEnd).Seconds())
	}
}

// holdDeliveries pauses the subscription matcher's consumer of the
// resource events, so that writes are measured without any delivery work,
// and returns what resumes it.
func (b *bench) holdDeliveries() (resume func()) {
	nc, err := nats.Connect("", nats.InProcessServer(b.stack.NATSServer()))
	if err != nil {
		fail(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PauseConsumer(ctx, infra.ResourceStream, subscriptions.MatcherConsumer, time.Now().Add(time.Hour)); err != nil {
		fail(fmt.Errorf("pausing the matcher: %w", err))
	}
	return func() {
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := js.ResumeConsumer(ctx, infra.ResourceStream, subscriptions.MatcherConsumer); err != nil {
			fail(fmt.Errorf("resuming the matcher: %w", err))
		}
	}
}

// subscribe creates an active rest-hook Subscription in the bench project.
func (b *bench) subscribe(criteria, endpoint string) {
	b.mustJSON("POST", "fhir/R4/Subscription", b.token, "application/fhir+json", map[string]any{
		"resourceType": "Subscription", "status": "active", "reason": "bench", "criteria": criteria,
		"channel": map[string]any{"type": "rest-hook", "endpoint": endpoint},
	}, 201)
}

// paced is drive with the clients together making rate operations a
// second; the wait for a client's turn is not timed.
func paced(name string, c, rate int, op func(int, int) bool) result {
	interval := time.Duration(c) * time.Second / time.Duration(rate)
	next := make([]time.Time, c)
	return driveWaiting(name, c, func(w int) {
		if next[w].IsZero() {
			next[w] = time.Now().Add(time.Duration(w) * interval / time.Duration(c))
		}
		time.Sleep(time.Until(next[w]))
		next[w] = next[w].Add(interval)
	}, op)
}

func waitFor(cond func() bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// botDeliveries is the stack's count of bot deliveries made (in-process).
func botDeliveries() float64 {
	for _, f := range gather() {
		if f.GetName() != "pinion_subscription_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["channel"] == "bot" && labels["result"] == "ok" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// latencyHistogram is the stack's commit-to-delivery histogram now.
func latencyHistogram() *dto.Histogram {
	for _, f := range gather() {
		if f.GetName() == "pinion_subscription_latency_seconds" {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	return &dto.Histogram{}
}

func gather() []*dto.MetricFamily {
	fs, _ := metrics.Registry.Gather()
	return fs
}

// printLatency prints p50 and p99 of what the histogram gained since
// before, interpolated within buckets.
func (b *bench) printLatency(name string, before *dto.Histogram) {
	if !b.inProcess {
		return
	}
	after := latencyHistogram()
	n := float64(after.GetSampleCount() - before.GetSampleCount())
	if n == 0 {
		fmt.Printf("%-44s no deliveries\n", name)
		return
	}
	q := func(p float64) float64 {
		want := p * n
		lo, prev := 0.0, 0.0
		for i, bk := range after.GetBucket() {
			c := float64(bk.GetCumulativeCount())
			if i < len(before.GetBucket()) {
				c -= float64(before.GetBucket()[i].GetCumulativeCount())
			}
			hi := bk.GetUpperBound()
			if c >= want {
				return lo + (hi-lo)*(want-prev)/max(c-prev, 1)
			}
			lo, prev = hi, c
		}
		return lo
	}
	fmt.Printf("%-44s p50 %7.3f ms  p99 %7.3f ms  (%0.f deliveries)\n", name, q(0.5)*1000, q(0.99)*1000, n)
}

// serveHooks answers rest-hooks on a loopback port with h and returns its
// base URL (http://127.0.0.1:<port>) and how to stop it.
func serveHooks(h http.HandlerFunc) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	go func() { _ = http.Serve(ln, h) }()
	return "http://" + ln.Addr().String(), func() { _ = ln.Close() }
}
