package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serverPID names the server process whose CPU time a measurement counts
// (with its worker processes). Throughput on a shared machine moves with
// whatever else runs; the CPU a build spends per request does not, so the
// two builds of a comparison can be told apart on a busy day too.
var serverPID = flag.Int("server-pid", 0, "process id of the server -url names, to report its CPU time (and its workers') per request; with no -url, this process (the clients' CPU counted too)")

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times: 100 on
// every architecture Go runs on.
const clockTicks = 100

// cpuTime is the CPU time so far of the server process and every process
// under it, or -1 where /proc cannot tell (not Linux, no server named).
func cpuTime() time.Duration {
	pid := *serverPID
	if pid == 0 {
		if *target != "" {
			return -1
		}
		pid = os.Getpid()
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone since the listing
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		id, err := strconv.Atoi(strings.TrimSpace(s[:strings.IndexByte(s, '(')]))
		if err != nil {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		parent[id], ticks[id] = ppid, utime+stime
	}
	if _, ok := ticks[pid]; !ok {
		return -1
	}
	var total int64
	for id, t := range ticks {
		for p := id; p != 0; p = parent[p] {
			if p == pid {
				total += t
				break
			}
			if _, known := parent[p]; !known {
				break
			}
		}
	}
	return time.Duration(total) * time.Second / clockTicks
}
