package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

func TestConfineRefusesASmallBudget(t *testing.T) {
	// Checked before any limit is set, so this process is untouched.
	if err := confine(1 << 20); err == nil || err.Error() != "budget of 1048576 bytes is too small" {
		t.Errorf("err = %v", err)
	}
	if code := childMain("1048576"); code != 2 {
		t.Errorf("a worker with a budget too small exits %d, want 2", code)
	}
}

func TestAddressSpace(t *testing.T) {
	vsz, err := addressSpace()
	if err != nil {
		t.Fatal(err)
	}
	if vsz <= 0 || vsz%int64(os.Getpagesize()) != 0 {
		t.Errorf("address space %d bytes", vsz)
	}
}

// What a worker is confined to, read from the kernel's view of it.
func TestWorkerConfinement(t *testing.T) {
	// A worker confines itself when it starts, before its first run: one
	// that has answered a run is confined (a worker only just started
	// once showed nice 0 in CI).
	p := solo(t)
	runJob(t, p, job(echo, "x"))
	pid := strconv.Itoa(liveWorker(t, p).cmd.Process.Pid)
	t.Run("nothing of the parent's environment", func(t *testing.T) {
		b, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		want := []string{envWorker + "=" + strconv.Itoa(workerBudget), "GOTRACEBACK=single", "GOGC=400"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("environment %q, want %q", got, want)
		}
	})
	t.Run("an address space of its runtime plus its budget", func(t *testing.T) {
		b, err := os.ReadFile("/proc/" + pid + "/limits")
		if err != nil {
			t.Fatal(err)
		}
		var soft, hard string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(strings.TrimPrefix(line, "Max address space")); strings.HasPrefix(line, "Max address space") && len(f) >= 2 {
				soft, hard = f[0], f[1]
			}
		}
		limit, err := strconv.ParseInt(soft, 10, 64)
		if err != nil || soft != hard {
			t.Fatalf("address space limit %q/%q", soft, hard)
		}
		if limit <= workerBudget || limit > workerBudget+16<<30 {
			t.Errorf("address space limit %d MiB for a budget of %d MiB", limit>>20, workerBudget>>20)
		}
	})
	t.Run("a lower CPU priority", func(t *testing.T) {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// Fields after the command name, which is in parentheses: nice is
		// the 19th field of the line, the 17th after the name.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		nice, err := strconv.Atoi(f[16])
		if err != nil || nice < workerNice {
			t.Errorf("nice %q, want at least %d", f[16], workerNice)
		}
	})
}

// A worker that does not answer by a run's deadline plus killGrace is
// killed, and the run answered; the next run gets a new worker.
func TestWatchdogKillsAWorkerThatDoesNotAnswer(t *testing.T) {
	p := solo(t)
	frozen := liveWorker(t, p)
	if err := syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The stop takes effect when the worker is next scheduled: on a busy
	// machine that can be after the run below is sent.
	waitStopped(t, frozen.cmd.Process.Pid)
	j := job(echo, "x")
	j.Limits.Timeout = 50 * time.Millisecond
	start := time.Now()
	res, err := p.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || res.Err.Limit != sandbox.LimitTimeout || res.Err.Message != "Bot timed out and did not stop; its worker process was stopped" {
		t.Errorf("got %+v", res.Err)
	}
	if d := time.Since(start); d < j.Limits.Timeout+killGrace || d > j.Limits.Timeout+killGrace+5*time.Second {
		t.Errorf("answered after %v, want about %v", d, j.Limits.Timeout+killGrace)
	}
	select {
	case <-frozen.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the frozen worker was not killed")
	}
	if r := frozen.endReason(); r != "a run outlived its deadline" {
		t.Errorf("end reason %q", r)
	}
	if res := runJob(t, p, job(echo, "after")); res.Err != nil || res.Text != "after" {
		t.Errorf("next run: %+v %v", res, res.Err)
	}
}

// waitStopped waits until the process is in the stopped state ('T' in
// /proc/<pid>/stat).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	eventually(t, fmt.Sprintf("process %d to stop", pid), func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name, which is in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		return i > 0 && len(b) > i+2 && b[i+2] == 'T'
	})
}
