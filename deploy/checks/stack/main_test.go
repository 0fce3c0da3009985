package stack

import (
	"os"
	"testing"

	"github.com/pinion-health/pinion/services/botexec/worker"
)

// TestMain lets the bot executor these tests start run its workers from
// this test binary.
func TestMain(m *testing.M) {
	worker.MainIfWorker()
	os.Exit(m.Run())
}
