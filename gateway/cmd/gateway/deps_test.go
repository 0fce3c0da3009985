package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The gateway keeps no data: its binary links neither store adapter nor
// their database drivers, only the bus (pkg/process).
func TestLinksNoStore(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the binary's packages:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/pinion-health/pinion/pkg/store", "github.com/pinion-health/pinion/pkg/infra", "go.mongodb.org/", "modernc.org/sqlite"} {
			if strings.HasPrefix(p, banned) {
				t.Errorf("the gateway links %s", p)
			}
		}
	}
}
