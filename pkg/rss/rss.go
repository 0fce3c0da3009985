// Package rss reads how much memory a process holds (its resident set), so
// that tests can show that hostile input leaves the process's memory
// bounded: a limit that is only asserted on the Go heap would miss memory a
// decoder or runtime holds elsewhere.
package rss

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var pageSize = int64(os.Getpagesize())

// Of is the resident set size of process pid in bytes (0 when it cannot be
// read: another OS, or the process is gone).
func Of(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * pageSize
}

// Self is this process's resident set size in bytes.
func Self() int64 { return Of(os.Getpid()) }

// Watch samples the resident set of the processes pids() names (this
// process when pids is nil) every few milliseconds until the returned
// function is called, which answers the largest growth seen over the sum
// at the start.
func Watch(pids func() []int) (stop func() int64) {
	if pids == nil {
		self := os.Getpid()
		pids = func() []int { return []int{self} }
	}
	sum := func() int64 {
		var n int64
		for _, p := range pids() {
			n += Of(p)
		}
		return n
	}
	start := sum()
	var peak atomic.Int64
	peak.Store(start)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if n := sum(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load() - start
	}
}
