//go:build unix

package worker

import "syscall"

// pollable makes the worker's pipes non-blocking before os.NewFile wraps
// them, so that they go through the runtime's poller: a reader that waits
// parks its goroutine rather than its thread, and the run it has just
// handed a frame to (a new run, a host call's answer) goes on at once on
// the same thread. Blocked in read(2), the thread kept its processor, and
// the run waited for a second thread to wake and take it: two wake-ups of a
// low-priority process per message instead of one.
func pollable(fds ...int) error {
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			return err
		}
	}
	return nil
}
