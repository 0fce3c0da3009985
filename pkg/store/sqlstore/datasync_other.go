//go:build !linux

package sqlstore

import "os"

// datasync flushes f (fsync where fdatasync is not offered).
func datasync(f *os.File) error { return f.Sync() }
