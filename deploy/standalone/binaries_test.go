package standalone

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// The tests that start processes (multi-process, crash, cluster) share one
// build of every command: linking six binaries took 10–20 s a test on CI's
// two cores, four times a run. TestMain removes the directory.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

// buildBinaries builds every command, once per test binary, and returns
// the directory that holds them.
func buildBinaries(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "pinion-bin-")
		if err != nil {
			binaries.err = err
			return
		}
		binaries.dir = dir
		build := exec.Command("go", "build", "-o", dir+"/",
			"./deploy/standalone/cmd/pinion", "./gateway/cmd/gateway", "./services/identity/cmd/identity",
			"./services/membership/cmd/membership", "./services/fhir/cmd/fhir", "./services/botexec/cmd/botexec")
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			binaries.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.dir
}

// removeBinaries deletes what buildBinaries built, if anything.
func removeBinaries() {
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
}
