//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package dirlock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const childEnv = "DIRLOCK_TEST_CHILD_DIR"

func mustAcquire(t *testing.T, dir string) *Lock {
	t.Helper()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", dir, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

func wantHeld(t *testing.T, dir string) *HeldError {
	t.Helper()
	l, err := Acquire(dir)
	if err == nil {
		l.Release()
		t.Fatalf("second Acquire(%s) succeeded, want *HeldError", dir)
	}
	var herr *HeldError
	if !errors.As(err, &herr) {
		t.Fatalf("Acquire(%s) error = %T %v, want *HeldError", dir, err, err)
	}
	if herr.Dir != dir {
		t.Errorf("HeldError.Dir = %q, want %q", herr.Dir, dir)
	}
	return herr
}

// (1) flock locks belong to the open file description, so a second open +
// flock in the same process conflicts (true on Linux and the BSDs).
func TestSecondAcquireSameProcess(t *testing.T) {
	dir := t.TempDir()
	before := time.Now().Add(-time.Second)
	l := mustAcquire(t, dir)

	fi, err := os.Stat(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("LOCK mode = %v, want 0600", perm)
	}
	raw, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	var h holderInfo
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("LOCK content %q: %v", raw, err)
	}
	if h.PID != os.Getpid() {
		t.Errorf("LOCK pid = %d, want %d", h.PID, os.Getpid())
	}

	herr := wantHeld(t, dir)
	host, _ := os.Hostname()
	if herr.PID != os.Getpid() || herr.Host != host || herr.Cmd != filepath.Base(os.Args[0]) {
		t.Errorf("HeldError = %+v, want pid %d host %q cmd %q", herr, os.Getpid(), host, filepath.Base(os.Args[0]))
	}
	if herr.Started.Before(before) || herr.Started.After(time.Now().Add(time.Second)) {
		t.Errorf("HeldError.Started = %v, not around now", herr.Started)
	}
	msg := herr.Error()
	if !strings.Contains(msg, fmt.Sprintf("(pid %d on host %s, since ", os.Getpid(), host)) {
		t.Errorf("Error() = %q", msg)
	}
	t.Logf("%v", msg)
}

// The holder may not have written its description yet: still a HeldError.
func TestHeldUnparseable(t *testing.T) {
	dir := t.TempDir()
	l := mustAcquire(t, dir)
	// Replacing the content does not affect the lock (same inode).
	if err := os.WriteFile(l.Path(), []byte(`{"pid": 12`), 0o600); err != nil {
		t.Fatal(err)
	}
	herr := wantHeld(t, dir)
	if herr.PID != 0 || herr.Cmd != "" {
		t.Errorf("HeldError = %+v, want unknown holder", herr)
	}
	if !strings.Contains(herr.Error(), "in use by another process;") {
		t.Errorf("Error() = %q", herr.Error())
	}
	// Empty file (holder truncated, not yet written).
	if err := os.Truncate(l.Path(), 0); err != nil {
		t.Fatal(err)
	}
	if herr := wantHeld(t, dir); herr.PID != 0 {
		t.Errorf("HeldError = %+v, want unknown holder", herr)
	}
}

// (3) Release frees the lock; the file stays.
func TestReleaseThenAcquire(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatalf("LOCK file gone after Release: %v", err)
	}
	l2 := mustAcquire(t, dir)
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireMissingDir(t *testing.T) {
	_, err := Acquire(filepath.Join(t.TempDir(), "nope"))
	var herr *HeldError
	if err == nil || errors.As(err, &herr) {
		t.Fatalf("Acquire(missing dir) = %v, want a plain error", err)
	}
}

// TestHelperChild is not a test: when childEnv is set it runs in a child
// process started by TestCrashedHolderReleases, takes the lock, says
// "locked", and holds it until stdin closes or 30 s pass.
func TestHelperChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashedHolderReleases")
	}
	if _, err := Acquire(dir); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("locked")
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// (2) A child process holds the lock; after kill -9 the kernel releases it.
func TestCrashedHolderReleases(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // closing it (or our death) ends the child
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); line == "locked" || strings.HasPrefix(line, "error:") {
				ready <- line
				break
			}
		}
		close(ready)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if line != "locked" {
			t.Fatalf("child did not lock: %q", line)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for child to lock")
	}

	herr := wantHeld(t, dir)
	if herr.PID != cmd.Process.Pid {
		t.Fatalf("HeldError.PID = %d, want child pid %d (%v)", herr.PID, cmd.Process.Pid, herr)
	}
	if herr.PID == os.Getpid() {
		t.Fatal("HeldError names the parent")
	}
	t.Logf("%v", herr)

	// kill -9: no chance for the child to clean up.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	waited = true
	stdin.Close()
	if ps := cmd.ProcessState; ps == nil || ps.Success() {
		t.Fatalf("child was not killed: %v", err)
	}

	l := mustAcquire(t, dir)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}
