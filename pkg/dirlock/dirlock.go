// Package dirlock makes sure only one process at a time uses a data
// directory.
//
// Acquire takes an exclusive, non-blocking flock(2) on <dir>/LOCK and writes
// a short JSON description of the holder (pid, host, start time, command)
// into it. A second process that calls Acquire on the same directory gets a
// *HeldError describing the holder instead of silently sharing the files.
//
// Why flock and not a pid file: the lock belongs to the open file
// description, so the kernel releases it when the holder's last descriptor
// is closed, which includes the process crashing or being killed with
// SIGKILL. There is no stale lock to clean up and no guessing whether a
// recorded pid is still alive or has been reused. The LOCK file itself is
// left in place on Release (removing it would race with a new holder that
// has already opened it); its content is only informational.
//
// Caveats:
//
//   - NFS and other network file systems are not supported. flock there is
//     either a no-op, a local-only lock, or (Linux) emulated with per-process
//     POSIX byte-range locks, so it does not reliably exclude a process on
//     another host, and the in-process semantics differ. Keep the data
//     directory on a local file system.
//   - The lock is advisory: it only excludes processes that also call
//     Acquire.
//   - The lock lasts as long as the descriptor is open. Keep the *Lock until
//     shutdown and call Release (the package keeps a reference to held locks
//     so the garbage collector cannot close the file behind your back).
//     Descriptors are opened close-on-exec, so child processes do not inherit
//     the lock.
//   - On platforms without flock (Windows, Plan 9, wasm, AIX, ...) Acquire
//     writes the description but does not lock; see dirlock_other.go.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FileName is the name of the lock file inside the data directory.
const FileName = "LOCK"

// maxInfoSize bounds how much of a LOCK file is read when describing the
// holder.
const maxInfoSize = 64 << 10

// Lock is a held data directory lock. The zero value is not usable; get one
// from Acquire.
type Lock struct {
	dir  string
	path string

	mu sync.Mutex
	f  *os.File // nil once released
}

// held keeps every unreleased Lock reachable. Otherwise a caller that drops
// its *Lock would let the *os.File finalizer close the descriptor and so
// silently release the lock at the next garbage collection.
var held sync.Map // *Lock -> struct{}

// Dir returns the data directory this lock protects, as passed to Acquire.
func (l *Lock) Dir() string { return l.dir }

// Path returns the path of the lock file.
func (l *Lock) Path() string { return l.path }

// Release unlocks and closes the lock file. The file is left in place.
// Calling Release more than once is harmless; later calls return nil.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	held.Delete(l)
	err := unlockFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dirlock: release %s: %w", l.path, err)
	}
	return nil
}

// HeldError is returned by Acquire when another open file description (in
// practice: another process) holds the lock. The fields describe the holder
// as far as its LOCK file could be read; they are zero if the holder had not
// yet written its description, or it could not be parsed.
type HeldError struct {
	Dir     string    // the data directory, as passed to Acquire
	PID     int       // holder's process id, 0 if unknown
	Host    string    // holder's hostname, "" if unknown
	Started time.Time // when the holder acquired the lock, zero if unknown
	Cmd     string    // base name of the holder's os.Args[0], "" if unknown
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data directory %s is in use by ", e.Dir)
	if e.Cmd != "" {
		b.WriteString(e.Cmd)
	} else {
		b.WriteString("another process")
	}
	var details []string
	if e.PID > 0 {
		d := fmt.Sprintf("pid %d", e.PID)
		if e.Host != "" {
			d += " on host " + e.Host
		}
		details = append(details, d)
	} else if e.Host != "" {
		details = append(details, "on host "+e.Host)
	}
	if !e.Started.IsZero() {
		details = append(details, "since "+e.Started.Format(time.RFC3339))
	}
	if len(details) > 0 {
		b.WriteString(" (" + strings.Join(details, ", ") + ")")
	}
	b.WriteString("; stop it first or choose another PINION_DATA_DIR")
	return b.String()
}

// holderInfo is the JSON written into the LOCK file.
type holderInfo struct {
	PID     int    `json:"pid"`
	Host    string `json:"host"`
	Started string `json:"started"` // RFC 3339
	Cmd     string `json:"cmd"`
}

func currentHolder() holderInfo {
	host, _ := os.Hostname()
	cmd := ""
	if len(os.Args) > 0 {
		cmd = filepath.Base(os.Args[0])
	}
	return holderInfo{
		PID:     os.Getpid(),
		Host:    host,
		Started: time.Now().UTC().Format(time.RFC3339),
		Cmd:     cmd,
	}
}

// Acquire takes the lock on dir, which must exist. It never blocks: if
// another holder has the lock it returns a *HeldError (test with errors.As).
// Other failures (unreadable directory, file system without lock support)
// are returned as ordinary errors.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	// os.OpenFile sets O_CLOEXEC, so exec'd children do not inherit the lock.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirlock: open lock file: %w", err)
	}
	locked, err := tryLockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	if !locked {
		herr := readHolder(f, dir)
		f.Close()
		return nil, herr
	}
	if err := writeHolder(f, currentHolder()); err != nil {
		unlockFile(f)
		f.Close()
		return nil, fmt.Errorf("dirlock: write %s: %w", path, err)
	}
	l := &Lock{dir: dir, path: path, f: f}
	held.Store(l, struct{}{})
	return l, nil
}

func writeHolder(f *os.File, h holderInfo) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	return f.Sync()
}

// readHolder describes the current holder from the content of its LOCK
// file. The holder may have just taken the lock and not written (or only
// partly written) its description, so any read or parse problem yields a
// HeldError with the unknown fields left zero.
func readHolder(f *os.File, dir string) *HeldError {
	herr := &HeldError{Dir: dir}
	data, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, maxInfoSize), maxInfoSize))
	if err != nil && !errors.Is(err, io.EOF) {
		return herr
	}
	var h holderInfo
	if json.Unmarshal(data, &h) != nil {
		return herr
	}
	herr.PID = h.PID
	herr.Host = h.Host
	herr.Cmd = h.Cmd
	if t, err := time.Parse(time.RFC3339, h.Started); err == nil {
		herr.Started = t
	}
	return herr
}
