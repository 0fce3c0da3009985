//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package dirlock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLockFile takes an exclusive, non-blocking flock on f. It reports
// false, nil if someone else holds the lock.
func tryLockFile(f *os.File) (bool, error) {
	return flock(f, unix.LOCK_EX|unix.LOCK_NB)
}

func unlockFile(f *os.File) error {
	_, err := flock(f, unix.LOCK_UN)
	return err
}

func flock(f *os.File, how int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	err = rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if !errors.Is(ferr, unix.EINTR) {
				return
			}
		}
	})
	if err != nil {
		return false, err
	}
	if errors.Is(ferr, unix.EWOULDBLOCK) || errors.Is(ferr, unix.EAGAIN) {
		return false, nil
	}
	if ferr != nil {
		return false, os.NewSyscallError("flock", ferr)
	}
	return true, nil
}
