package standalone

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// walkthrough is the shell of the README's walk-through: every sh block
// from its heading to the next top-level section, in order.
func walkthrough(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## A walk-through with curl")
	end := strings.Index(readme[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("README has no walk-through section")
	}
	section := readme[start : start+1+end]
	var script strings.Builder
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		code, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatal("an unclosed sh block in the walk-through")
		}
		script.WriteString(code)
	}
	return script.String()
}

// The README's walk-through runs as written, block after block, against a
// stack started as `make run` starts it (credentials generated and saved in
// the data directory, e-mails in its mail folder).
func TestREADMEWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the walk-through needs %s (.ci/run installs it)", tool)
		}
	}
	script := walkthrough(t)
	data := t.TempDir()
	st := ownStack(t, map[string]string{
		"PINION_DATA_DIR": data, "PINION_SUPERADMIN_CLIENT_ID": "", "PINION_SUPERADMIN_CLIENT_SECRET": "",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "PINION_BASE_URL=http://"+st.Addr+"/", "PINION_DATA_DIR="+data)
	cmd.Env = append(cmd.Env, "CLIENT_ID=", "CLIENT_SECRET=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walk-through stopped: %v\n%s\n--- script ---\n%s", err, out, script)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// What the blocks print: the patient found, Ada and her project, the
	// Basic search's Bundle, the bot's answer, its subscription's status,
	// the project's name, the exported patient.
	want := []string{"", "Ada", "Clinic", "Bundle", "hello", "active", "Clinic", ""}
	if len(lines) != len(want) {
		t.Fatalf("the walk-through printed:\n%s", out)
	}
	for i, w := range want {
		if w != "" && lines[i] != w {
			t.Errorf("line %d: %q, want %q\n%s", i, lines[i], w, out)
		}
	}
	if lines[0] == "" || lines[7] != lines[0] {
		t.Errorf("the exported patient %q is not the one created, %q", lines[7], lines[0])
	}
}
