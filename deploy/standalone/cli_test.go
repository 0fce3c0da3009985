package standalone

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"

	"github.com/pinion-health/pinion/pkg/config"
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
	// Absolute, for commands run in a directory of their own.
	tool, _ := filepath.Abs(medplumCLI)
	cmd := exec.CommandContext(ctx, "node", append([]string{"--experimental-websocket", tool}, args...)...)
	cmd.Env = c.env
	return cmd
}

// `medplum login`, the tool's default (authorization code) flow, completes
// against Pinion in a browser, and the tool then works with that sign-in.
func TestMedplumLogin(t *testing.T) {
	parallelIn(t, browsers)
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

// adminClient makes a client application of the project and promotes its
// membership to project admin, as a Medplum user sets up the CLI.
func adminClient(t *testing.T, su, pid, name string) (id, secret string) {
	t.Helper()
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": name}))
	expect(t, r, 201)
	id, secret = r.json(t)["id"].(string), r.json(t)["secret"].(string)
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+id, su, "", nil)
	_, entries := bundleOf(t, r)
	expect(t, do(t, "PATCH", "admin/projects/"+pid+"/members/"+entries[0]["id"].(string), su, "application/json-patch+json",
		[]byte(`[{"op":"replace","path":"/admin","value":true}]`)), 200)
	return id, secret
}

// run runs the tool in dir and returns what it printed; it fails the test
// when the tool fails.
func (c *cli) run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := c.try(t, dir, args...)
	if err != nil {
		t.Fatalf("medplum %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// try runs the tool and returns its output and how it ended.
func (c *cli) try(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := c.command(ctx, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// printed decodes the JSON the tool printed.
func printed(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &m); err != nil {
		t.Fatalf("not JSON: %s", out)
	}
	return m
}

// Every command of Medplum's CLI a project's developer uses, unmodified,
// signed in with a project-admin client's credentials from the
// environment, as Medplum's documentation sets it up.
func TestMedplumCLICommands(t *testing.T) {
	parallelIn(t, browsers)
	c := newCLI(t)
	pid, su := adminProject(t, "CLI tools")
	id, secret := adminClient(t, su, pid, "CLI robot")
	c.env = append(c.env, "MEDPLUM_CLIENT_ID="+id, "MEDPLUM_CLIENT_SECRET="+secret)
	dir := t.TempDir()

	t.Run("whoami, project list, project current", func(t *testing.T) {
		who := c.run(t, dir, "whoami")
		if !strings.Contains(who, "Profile: CLI robot (ClientApplication/"+id+")") || !strings.Contains(who, "Project: CLI tools (Project/"+pid+")") {
			t.Fatalf("whoami:\n%s", who)
		}
		if out := c.run(t, dir, "project", "list"); !strings.Contains(out, "CLI tools (Project/"+pid+")") {
			t.Fatalf("project list:\n%s", out)
		}
		if out := c.run(t, dir, "project", "current"); !strings.Contains(out, "CLI tools (Project/"+pid+")") {
			t.Fatalf("project current:\n%s", out)
		}
	})
	t.Run("token", func(t *testing.T) {
		tok := strings.TrimSpace(c.run(t, dir, "token"))
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 200)
	})
	t.Run("post, get, put, patch, delete", func(t *testing.T) {
		p := printed(t, c.run(t, dir, "post", "Patient", `{"resourceType":"Patient","name":[{"family":"Cli","given":[]}],"gender":""}`))
		pat := p["id"].(string)
		if p["meta"].(map[string]any)["project"] != pid {
			t.Fatalf("posted outside the project: %v", p)
		}
		got := printed(t, c.run(t, dir, "get", "Patient/"+pat))
		if got["name"].([]any)[0].(map[string]any)["family"] != "Cli" {
			t.Fatalf("get: %v", got)
		}
		got["gender"] = "female"
		put := printed(t, c.run(t, dir, "put", "Patient/"+pat, string(mustJSON(got))))
		if put["gender"] != "female" || put["meta"].(map[string]any)["versionId"] == got["meta"].(map[string]any)["versionId"] {
			t.Fatalf("put: %v", put)
		}
		if patched := printed(t, c.run(t, dir, "patch", "Patient/"+pat, `[{"op":"add","path":"/active","value":true}]`)); patched["active"] != true {
			t.Fatalf("patch: %v", patched)
		}
		c.run(t, dir, "delete", "Patient/"+pat)
		expect(t, do(t, "GET", "fhir/R4/Patient/"+pat, su, "", nil), 410)
	})
	t.Run("project invite", func(t *testing.T) {
		c.run(t, dir, "project", "invite", "Ivy", "Invited", "ivy-cli@example.com")
		r := do(t, "GET", "fhir/R4/ProjectMembership?_project="+pid+"&profile-type=Practitioner", su, "", nil)
		if _, entries := bundleOf(t, r); len(entries) != 1 || entries[0]["profile"].(map[string]any)["display"] != "Ivy Invited" {
			t.Fatalf("invited: %s", r.body)
		}
	})
	t.Run("bulk import and export", func(t *testing.T) {
		var lines []string
		for i := range 3 {
			lines = append(lines, fmt.Sprintf(`{"resourceType":"Patient","name":[{"family":"Bulk%d"}]}`, i))
		}
		if err := os.WriteFile(filepath.Join(dir, "patients.ndjson"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c.run(t, dir, "bulk", "import", "patients.ndjson")
		r := do(t, "GET", "fhir/R4/Patient?_project="+pid+"&name=Bulk&_summary=count", su, "", nil)
		if r.json(t)["total"] != float64(3) {
			t.Fatalf("imported: %s", r.body)
		}
		out := filepath.Join(dir, "export")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		c.run(t, dir, "bulk", "export", "-t", "Patient", "-d", out)
		files, _ := filepath.Glob(filepath.Join(out, "*.ndjson"))
		n := 0
		for _, f := range files {
			b, _ := os.ReadFile(f)
			n += strings.Count(string(b), "\n")
		}
		if len(files) == 0 || n != 3 {
			t.Fatalf("exported %d patients in %v", n, files)
		}
	})
	t.Run("bot create, save, deploy, execute", func(t *testing.T) {
		write := func(name, text string) {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		source := func(greeting string) string {
			return "import { BotEvent, MedplumClient } from '@medplum/core';\n\nexport async function handler(medplum: MedplumClient, event: BotEvent<string>): Promise<string> {\n  return '" + greeting + " ' + event.input;\n}\n"
		}
		// What esbuild or tsc makes of it, as a Medplum project builds it.
		built := func(greeting string) string {
			return "\"use strict\";\nObject.defineProperty(exports, \"__esModule\", { value: true });\nexports.handler = handler;\nasync function handler(medplum, event) {\n  return '" + greeting + " ' + event.input;\n}\n"
		}
		write("src/greeter.ts", source("hello"))
		write("dist/greeter.js", built("hello"))
		out := c.run(t, dir, "bot", "create", "greeter", pid, "src/greeter.ts", "dist/greeter.js")
		i := strings.Index(out, "Success! Bot created: ")
		if i < 0 {
			t.Fatalf("bot create:\n%s", out)
		}
		bot := strings.TrimSpace(strings.SplitN(out[i+len("Success! Bot created: "):], "\n", 2)[0])
		execute := func() string {
			r := do(t, "POST", "fhir/R4/Bot/"+bot+"/$execute", su, "text/plain", []byte("world"))
			expect(t, r, 200)
			return string(r.body)
		}
		codeOf := func(field string) (map[string]any, string) {
			r := do(t, "GET", "fhir/R4/Bot/"+bot, su, "", nil)
			expect(t, r, 200)
			a := r.json(t)[field].(map[string]any)
			link := a["url"].(string)
			r = do(t, "GET", "fhir/R4/Binary/"+binaryIDOf(link), su, "", nil, "Accept", "*/*")
			expect(t, r, 200)
			return a, string(r.body)
		}
		if got := execute(); got != "hello world" {
			t.Fatalf("after create: %q", got)
		}
		if a, text := codeOf("sourceCode"); a["title"] != "greeter.ts" || text != source("hello") {
			t.Fatalf("sourceCode after create: %v %q", a, text)
		}
		if a, _ := codeOf("executableCode"); a["title"] != "greeter.js" {
			t.Fatalf("executableCode after create: %v", a)
		}
		// bot save stores the source only; bot deploy the built code only.
		write("src/greeter.ts", source("hi"))
		c.run(t, dir, "bot", "save", "greeter")
		if _, text := codeOf("sourceCode"); text != source("hi") {
			t.Fatalf("sourceCode after save: %q", text)
		}
		if got := execute(); got != "hello world" {
			t.Fatalf("save changed what runs: %q", got)
		}
		write("dist/greeter.js", built("hi"))
		c.run(t, dir, "bot", "deploy", "greeter")
		if got := execute(); got != "hi world" {
			t.Fatalf("after deploy: %q", got)
		}
		if a, text := codeOf("sourceCode"); a["title"] != "greeter.ts" || text != source("hi") {
			t.Fatalf("deploy touched sourceCode: %v %q", a, text)
		}
	})
}

// The CLI's other ways to sign in: HTTP Basic on every request works; the
// JWT grants Pinion does not take are refused with a reason.
func TestMedplumCLILogins(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "CLI logins")
	id, secret := adminClient(t, su, pid, "CLI signer")
	dir := t.TempDir()

	c := newCLI(t)
	c.run(t, dir, "login", "--auth-type", "client-credentials", "--client-id", id, "--client-secret", secret)
	if who := c.run(t, dir, "whoami"); !strings.Contains(who, "Project: CLI logins (Project/"+pid+")") {
		t.Fatalf("whoami after a client-credentials login:\n%s", who)
	}

	c = newCLI(t)
	c.run(t, dir, "login", "--auth-type", "basic", "--client-id", id, "--client-secret", secret)
	p := printed(t, c.run(t, dir, "post", "Patient", `{"resourceType":"Patient","name":[{"family":"Basic"}]}`))
	if p["meta"].(map[string]any)["author"].(map[string]any)["reference"] != "ClientApplication/"+id {
		t.Fatalf("basic: %v", p)
	}
	if b := printed(t, c.run(t, dir, "get", "Patient?name=Basic")); b["resourceType"] != "Bundle" {
		t.Fatalf("basic search: %v", b)
	}

	c = newCLI(t)
	// --verbose: the tool prints the server's reason only then.
	out, err := c.try(t, dir, "login", "--verbose", "--auth-type", "jwt-bearer", "--client-id", id, "--client-secret", secret,
		"--subject", "someone", "--issuer", "me", "--audience", "oauth2/token")
	if err == nil || !strings.Contains(out, "Unsupported grant_type") {
		t.Fatalf("jwt-bearer: %v\n%s", err, out)
	}

	// jwt-assertion: a client whose public key is at its jwksUri.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{
		"name": "CLI backend", "jwksUri": jwksServer(t, jose.JSONWebKey{Key: key.Public(), Use: "sig"})}))
	expect(t, r, 201)
	backend := r.json(t)["id"].(string)
	c = newCLI(t)
	// The assertion's audience is the tool's base URL and the token path:
	// the server's own base URL.
	c.run(t, dir, "login", "--auth-type", "jwt-assertion", "--client-id", backend, "--private-key-path", keyFile,
		"--base-url", config.DeriveBaseURL(stack.Addr), "--audience", "oauth2/token")
	if who := c.run(t, dir, "whoami"); !strings.Contains(who, "Profile: CLI backend (ClientApplication/"+backend+")") {
		t.Fatalf("whoami after a jwt-assertion login:\n%s", who)
	}
}
