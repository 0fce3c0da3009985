package standalone

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// How the package's tests share time (see the comment atop stack_test.go):
// a test on the shared stack that makes its own projects and people calls
// t.Parallel (or parallelIn, for a group whose members must not crowd each
// other); Go runs such tests together once every sequential one is done,
// so a sequential test may still swap base (ownStack) without a parallel
// one seeing it.

// maxParallel is how many parallel tests run at once when -parallel is not
// given: most of them wait on the stack, a browser or a child process
// rather than compute, so the default (GOMAXPROCS, 2 on CI) would leave
// them queued; the groups below bound the heavy ones.
const maxParallel = 16

// raiseParallel applies maxParallel unless the command line set -parallel.
// It runs in TestMain, after flag.Parse and before m.Run reads the flag.
func raiseParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(maxParallel))
	}
}

// A group of parallel tests, at most cap(g) of them running at once.
type group chan struct{}

var (
	// processStacks: a multi-process stack (up to thirteen processes under
	// load, with deadlines on every request) runs alone among its kind.
	processStacks = make(group, 1)
	// browsers: Chromium and Medplum's CLI are CPU-bound; two at once keep
	// CI's two cores busy without pushing a step past its time-out.
	browsers = make(group, 2)
	// ownStacks: tests that start a stack of their own (parallelStack);
	// two at once, so that their start-ups do not starve the rest.
	ownStacks = make(group, 2)
)

// parallelIn marks the test parallel and holds a slot of g until it ends
// (after its own clean-ups, which t.Cleanup runs first).
func parallelIn(t *testing.T, g group) {
	t.Helper()
	t.Parallel()
	g <- struct{}{}
	t.Cleanup(func() { <-g })
}

// ownBases holds the base URL of each top-level test that runs parallel
// against a server of its own (useBase).
var ownBases sync.Map

// useBase sends the requests do makes for t, and for its subtests, to b
// rather than to the shared stack, without touching base (which parallel
// tests read); restore undoes it.
func useBase(t *testing.T, b string) (restore func()) {
	t.Helper()
	name := topTest(t)
	prev, had := ownBases.Load(name)
	ownBases.Store(name, b)
	return func() {
		if had {
			ownBases.Store(name, prev)
		} else {
			ownBases.Delete(name)
		}
	}
}

// parallelStack starts a stack of the test's own, on a fresh data
// directory with extra settings, as ownStack does, for a test that runs in
// parallel: its requests go there through useBase, and base stays the
// shared stack's. The stack stops when the test ends.
func parallelStack(t *testing.T, extra map[string]string) *Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Start(ctx, testConfig(t.TempDir(), extra), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	own := "http://" + st.Addr + "/"
	restore := useBase(t, own)
	t.Cleanup(func() {
		restore()
		st.Close()
	})
	waitReadyAt(t, own)
	return st
}

// baseFor is the base URL requests of t go to: its own server's if it
// named one with useBase, else base.
func baseFor(t testing.TB) string {
	if b, ok := ownBases.Load(topTest(t)); ok {
		return b.(string)
	}
	return base
}

// topTest is the name of the top-level test t is, or runs under.
func topTest(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

// A parallel test's requests go to the server it named with useBase, its
// subtests' too, while base (the shared stack, which other parallel tests
// use) stays as it was; restore sends them back to the shared stack.
func TestUseBaseKeepsToItsTest(t *testing.T) {
	t.Parallel()
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(r.URL.Path))
	}))
	defer own.Close()
	shared := base
	restore := useBase(t, own.URL+"/")
	if base != shared {
		t.Fatalf("useBase changed base to %s", base)
	}
	r := do(t, "GET", "readyz", "", "", nil)
	if r.status != http.StatusTeapot || string(r.body) != "/readyz" {
		t.Fatalf("with useBase: %d %s, want the test's own server", r.status, r.body)
	}
	t.Run("subtest", func(t *testing.T) {
		if r := do(t, "GET", "x", "", "", nil); r.status != http.StatusTeapot {
			t.Fatalf("a subtest's request: %d %s, want the test's own server", r.status, r.body)
		}
	})
	restore()
	expect(t, do(t, "GET", "readyz", "", "", nil), 200)
}
