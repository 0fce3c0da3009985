package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
)

// fairWrites measures a quiet project's single creates while another
// project loads four 1,000-entry transaction Bundles at a time: the
// store's writer takes turns by project, so the quiet project's create
// waits for one Bundle at most, not for all that are queued.
func (b *bench) fairWrites() {
	busy, quiet := b.ownProject("bulk loads"), b.ownProject("beside bulk loads")
	entries := make([]any, 1000)
	for i := range entries {
		entries[i] = map[string]any{"resource": patientBody(i), "request": map[string]any{"method": "POST", "url": "Patient"}}
	}
	bundle, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "transaction", "entry": entries})
	small, _ := json.Marshal(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": "Beside"}}})

	var stop atomic.Bool
	var loads, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if st, _ := b.hc.do("POST", b.base+"fhir/R4", busy, "application/fhir+json", bundle); st == 200 {
					loads.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	drive("POST Patient beside 4 bulk loads (1 client)", 1, func(int, int) bool {
		st, _ := b.hc.do("POST", b.base+"fhir/R4/Patient", quiet, "application/fhir+json", small)
		return st == 201
	})
	stop.Store(true)
	wg.Wait()
	fmt.Printf("%-44s %d Bundles of 1,000 loaded meanwhile, %d failed\n", "", loads.Load(), failed.Load())
}
