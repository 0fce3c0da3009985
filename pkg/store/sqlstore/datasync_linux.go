package sqlstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync flushes f's data, and its size when it grew (fdatasync, as
// SQLite syncs its WAL on Linux).
func datasync(f *os.File) error {
	return unix.Fdatasync(int(f.Fd()))
}
