package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The growth load's shape: bundles big enough that a request's fixed cost
// fades, and few loaders, so the server keeps most of the 2 cores.
const (
	growBatch   = 500
	growLoaders = 4
	growMaxFail = 5 // failed bundles and entries tolerated before the load stops
)

// grow loads n Patients through the API in transaction Bundles, as an
// import would, so that the ops measured after it run on a grown store.
// Their ids join b.patients: reads and updates then range over all of them.
// They continue the population after the patients already known.
func (b *bench) grow(n int) {
	first := len(b.patients)
	batches := make(chan int) // each batch's first k
	var loaded, failures atomic.Int64
	var stop atomic.Bool
	ids := make([][]string, growLoaders)
	lat := make([][]time.Duration, growLoaders)
	var wg sync.WaitGroup
	t0 := time.Now()
	for l := range growLoaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range batches {
				t := time.Now()
				got, failed, err := b.loadBundle(b.token, first+from, first+min(from+growBatch, n))
				lat[l] = append(lat[l], time.Since(t))
				ids[l] = append(ids[l], got...)
				loaded.Add(int64(len(got)))
				if failed > 0 {
					slog.Warn("growth load failure", "failed", failed, "first", err)
					if failures.Add(int64(failed)) > growMaxFail {
						stop.Store(true)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go growProgress(&loaded, n, t0, done)
	for from := 0; from < n && !stop.Load(); from += growBatch {
		batches <- from
	}
	close(batches)
	wg.Wait()
	close(done)
	elapsed := time.Since(t0)
	if f := failures.Load(); f > growMaxFail {
		fail(fmt.Errorf("growth load: %d failures (more than %d), %d of %d patients loaded", f, growMaxFail, loaded.Load(), n))
	}
	var all []time.Duration
	for l := range ids {
		b.patients = append(b.patients, ids[l]...)
		all = append(all, lat[l]...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	fmt.Printf("%-44s %9.0f res/s  bundle p50 %7.1f ms  p99 %7.1f ms  loaded %d/%d in %s  failures %d\n",
		fmt.Sprintf("growth: transaction Bundles of %d Patients", growBatch), float64(loaded.Load())/elapsed.Seconds(),
		ms(all[len(all)*50/100]), ms(all[len(all)*99/100]), loaded.Load(), n, elapsed.Round(time.Second), failures.Load())
}

// loadBundle posts the Patients from..to-1 in one transaction, with token,
// and returns the ids created, how many failed (all of them when the bundle did), and
// the first failure.
func (b *bench) loadBundle(token string, from, to int) (ids []string, failed int, err error) {
	entries := make([]any, 0, to-from)
	for k := from; k < to; k++ {
		entries = append(entries, map[string]any{"resource": patientBody(k), "request": map[string]any{"method": "POST", "url": "Patient"}})
	}
	body, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "transaction", "entry": entries})
	st, resp := b.hc.do("POST", b.base+"fhir/R4/", token, "application/fhir+json", body)
	var out struct {
		Entry []struct {
			Response struct{ Status, Location string }
		}
	}
	if st != 200 || json.Unmarshal(resp, &out) != nil || len(out.Entry) != to-from {
		return nil, to - from, fmt.Errorf("bundle %d-%d: %d %.300s", from, to, st, resp)
	}
	for i, e := range out.Entry {
		// Location is …/fhir/R4/Patient/<id>/_history/<version>.
		_, rest, _ := strings.Cut(e.Response.Location, "/Patient/")
		id, _, _ := strings.Cut(rest, "/")
		if !strings.HasPrefix(e.Response.Status, "201") || id == "" {
			if failed++; err == nil {
				err = fmt.Errorf("bundle %d-%d entry %d: %q at %q", from, to, i, e.Response.Status, e.Response.Location)
			}
			continue
		}
		ids = append(ids, id)
	}
	return ids, failed, err
}

// growProgress logs the load's progress every few seconds until done closes.
func growProgress(loaded *atomic.Int64, n int, t0 time.Time, done <-chan struct{}) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			l := loaded.Load()
			rate := float64(l) / time.Since(t0).Seconds()
			eta := "unknown"
			if rate > 0 {
				eta = time.Duration(float64(int64(n)-l) / rate * float64(time.Second)).Round(time.Second).String()
			}
			slog.Info("growing", "loaded", l, "total", n, "rate", fmt.Sprintf("%.0f/s", rate), "eta", eta)
		}
	}
}
