package worker

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// workerNice is the CPU priority of a worker: the API (in the parent)
// comes first when both want the CPU.
const workerNice = 10

// confine sets the worker's limits before it runs anything: an address
// space of what the Go runtime has already reserved plus budget (past it
// an allocation fails and the runtime ends the worker), a garbage
// collector that works harder as the heap nears the budget, a smaller
// goroutine stack ceiling (a runaway recursion ends sooner, having taken
// less), and a lower CPU priority.
func confine(budget int64) error {
	if budget < 64<<20 {
		return fmt.Errorf("budget of %d bytes is too small", budget)
	}
	// syscall.Getpriority answers the kernel's 20 - nice.
	if p, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err == nil && 20-p < workerNice {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, workerNice); err != nil {
			return fmt.Errorf("priority: %w", err)
		}
	}
	vsz, err := addressSpace()
	if err != nil {
		return err
	}
	lim := uint64(vsz + budget)
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		return fmt.Errorf("address space limit: %w", err)
	}
	debug.SetMemoryLimit(budget * 3 / 4)
	debug.SetMaxStack(maxStack)
	return nil
}

// addressSpace is the process's virtual size in bytes.
func addressSpace() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(f[0], 10, 64)
	return pages * int64(os.Getpagesize()), err
}
