package gateway

import (
	"fmt"
	"testing"
	"time"
)

// A refused token goes to the trail once a minute, and a flood of distinct
// ones no faster than the bound.
func TestRefusalsDue(t *testing.T) {
	r := newRefusals()
	now := time.Now()
	if !r.due("a", now) || r.due("a", now.Add(30*time.Second)) || !r.due("a", now.Add(61*time.Second)) {
		t.Fatal("one token: once a minute")
	}
	r = newRefusals()
	n := 0
	for i := range 1000 {
		if r.due(fmt.Sprint("forged-", i), now) {
			n++
		}
	}
	if n != refusalBurst || r.dropped.Load() != int64(1000-refusalBurst) {
		t.Fatalf("%d of 1000 forged tokens at once recorded, %d counted as dropped; want the burst, %d", n, r.dropped.Load(), refusalBurst)
	}
	if !r.due("later", now.Add(time.Second)) {
		t.Fatal("the bound refills")
	}
}
