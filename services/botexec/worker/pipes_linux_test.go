package worker

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A worker's pipes are non-blocking, so that its runtime polls them rather
// than holding a thread in read(2) (see pollable).
func TestWorkerPipesArePolled(t *testing.T) {
	p := solo(t)
	runJob(t, p, job(echo, "x"))
	pid := strconv.Itoa(liveWorker(t, p).cmd.Process.Pid)
	for _, fd := range []string{"3", "4"} {
		b, err := os.ReadFile("/proc/" + pid + "/fdinfo/" + fd)
		if err != nil {
			t.Fatal(err)
		}
		var flags int64 = -1
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				if err != nil {
					t.Fatalf("fd %s: %q", fd, line)
				}
			}
		}
		if flags < 0 || flags&syscall.O_NONBLOCK == 0 {
			t.Errorf("fd %s of the worker is blocking (flags %o)", fd, flags)
		}
	}
}
