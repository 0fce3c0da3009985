package standalone

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// medplumCLI is Medplum's command line tool, unmodified, as `npm ci` in
// tests/cli installs it (make test does).
var medplumCLI = filepath.Join("..", "..", "tests", "cli", "node_modules", "@medplum", "cli", "dist", "cjs", "index.cjs")

// cli runs the tool with a home of its own (where it keeps its sign-in)
// and a browser opener that writes the URL it is given to a file.
type cli struct {
	home, opened string
	env          []string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	if _, err := os.Stat(medplumCLI); err != nil {
		t.Skipf("Medplum's command line tool is not installed (cd tests/cli && npm ci): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	dir := t.TempDir()
	c := &cli{home: filepath.Join(dir, "home"), opened: filepath.Join(dir, "opened-url")}
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{c.home, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The tool opens the sign-in page with xdg-open; this one hands the
	// URL to the test's browser instead.
	opener := "#!/bin/sh\nprintf '%s' \"$1\" > " + c.opened + ".tmp && mv " + c.opened + ".tmp " + c.opened + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(opener), 0o755); err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "HOME="+c.home, "PATH="+bin+":"+os.Getenv("PATH"), "MEDPLUM_BASE_URL="+base)
	return c
}

func (c *cli) command(ctx context.Context, args ...string) *exec.Cmd {
	// Node 20 needs the flag for the global WebSocket @medplum/core expects.
	cmd := exec.CommandContext(ctx, "node", append([]string{"--experimental-websocket", medplumCLI}, args...)...)
	cmd.Env = c.env
	return cmd
}

// `medplum login`, the tool's default (authorization code) flow, completes
// against Pinion in a browser, and the tool then works with that sign-in.
func TestMedplumLogin(t *testing.T) {
	c := newCLI(t)
	pid, su := adminProject(t, "CLI clinic")
	// A new person each run: one project, so no project page.
	email := "cli-user-" + pid + "@example.com"
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Cli", "lastName", "User", "email", email,
			"sendEmail", false, "password", "cli user password")), 200)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	login := c.command(ctx, "login")
	var out bytes.Buffer
	login.Stdout, login.Stderr = &out, &out
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- login.Wait() }()

	var page string
	for page == "" {
		select {
		case err := <-done:
			t.Fatalf("medplum login ended before opening a browser: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if b, err := os.ReadFile(c.opened); err == nil {
			page = string(b)
		}
	}
	if !strings.HasPrefix(page, base+"oauth2/authorize?") || !strings.Contains(page, "client_id=medplum-cli") {
		t.Fatalf("the tool opened %s", page)
	}

	b := newBrowser(t)
	run(t, b, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("password")))
	shot(t, b, "medplum-login")
	run(t, b,
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), "cli user password"),
		chromedp.Click(chromedp.CSS("button")))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("medplum login: %v\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("medplum login never finished:\n%s", out.String())
	}
	if text := get(t, b, chromedp.Text(chromedp.CSS("body"))); !strings.Contains(text, "Signed in as Cli User") {
		t.Fatalf("the tool's callback page: %s", text)
	}

	// whoami shows who and where, by name, from the token answer.
	who, err := c.command(ctx, "whoami").CombinedOutput()
	if err != nil || !strings.Contains(string(who), "Profile: Cli User (Practitioner/") || !strings.Contains(string(who), "Project: CLI clinic (Project/"+pid+")") {
		t.Fatalf("medplum whoami: %v\n%s", err, who)
	}
	// The tool's stored sign-in works: `medplum token` reads /auth/me with it.
	tok, err := c.command(ctx, "token").CombinedOutput()
	if err != nil || strings.Count(strings.TrimSpace(string(tok)), ".") != 2 {
		t.Fatalf("medplum token: %v\n%s", err, tok)
	}
	r := do(t, "GET", "auth/me", strings.TrimSpace(string(tok)), "", nil)
	expect(t, r, 200)
	if r.json(t)["project"].(map[string]any)["id"] != pid {
		t.Fatalf("auth/me: %s", r.body)
	}
}
