package standalone

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/pinion-health/pinion/pkg/config"
)

// medplumAppDir is Medplum's own web app (5.0.10, built), which lives
// beside the repository, not in it: ../shared/medplum-app from the
// repository's root, and this package is two levels down.
const medplumAppDir = "../../../shared/medplum-app"

// Medplum's web app, the client a team moving to Pinion points at it
// first, walked in Chromium as a person would use it (issue 37, "How it is
// shown"): sign in with e-mail and password and choose a project; the
// Patient list with a search, a filter and a sort; open a Patient, edit and
// save; create one from the form with a coded field and an attachment; the
// project admin pages (invite, edit a membership, remove a user, a new
// client, a new bot and its editor); the Security page, where a session is
// revoked; sign out. Every request the app makes to Pinion on the way must
// succeed (recordPinionTraffic reports those that fail, at the end or at
// the step where the walk stopped); calls to the internet (the bot
// editor's code panes) do not count.
func TestMedplumApp(t *testing.T) {
	parallelIn(t, browsers)
	app := startMedplumApp(t)
	ctx := newBrowser(t)
	traffic := recordPinionTraffic(t, ctx, app.pinion)

	// The people and data the walk needs, through the API.
	pid, su := adminProject(t, "App clinic")
	const ada, adaPassword = "ada-app@example.com", "ada's app password"
	adaMember := member(t, su, pid, "resourceType", "Practitioner", "firstName", "Ada", "lastName", "Apple",
		"email", ada, "password", adaPassword, "admin", true)
	pid2, _ := adminProject(t, "App other clinic")
	member(t, su, pid2, "resourceType", "Practitioner", "firstName", "Ada", "lastName", "Apple",
		"email", ada, "password", adaPassword, "admin", true)
	// A session of Ada's elsewhere, for the Security page to revoke.
	elsewhere := signInWith(t, ada, adaPassword, pid, "curl/8.5.0")["access_token"].(string)
	adaAPI := signIn(t, ada, adaPassword, pid, "openid")["access_token"].(string)
	// Created oldest first, so that the newest-first default order is not
	// the order by name.
	for _, p := range []struct{ given, family, gender string }{
		{"Carol", "Smithers", "female"}, {"Bob", "Jones", "male"}, {"Alice", "Smith", "female"},
	} {
		expect(t, do(t, "POST", "fhir/R4/Patient", adaAPI, "application/fhir+json", mustJSON(map[string]any{
			"resourceType": "Patient", "gender": p.gender,
			"name": []any{map[string]any{"given": []string{p.given}, "family": p.family}},
		})), 201)
	}

	// Sign in: e-mail, then password, then the project.
	traffic.step("sign in")
	run(t, ctx, chromedp.Navigate(app.url+"signin"), chromedp.WaitVisible(chromedp.CSS(`input[name=email]`)))
	shot(t, ctx, "app-signin")
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), ada),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)))
	waitJS(t, ctx, "the password form (the answer of POST /auth/method)", `!!document.querySelector("input[name=password]")`)
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), adaPassword),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)))
	option := fmt.Sprintf(`[role=option][value=%q]`, adaMember["id"])
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(option)))
	shot(t, ctx, "app-choose-project")
	run(t, ctx, chromedp.Click(chromedp.CSS(option)))
	waitJS(t, ctx, "the Patient list after sign-in", `location.pathname === "/Patient" && !!document.querySelector("table tbody tr")`)
	if got := evalJS[string](t, ctx, `JSON.parse(localStorage["@medplum:activeLogin"]).project.display`); got != "App clinic" {
		t.Fatalf("signed in to project %q", got)
	}
	shot(t, ctx, "app-patients")

	// The Patient list: the header's search, a column filter, a sort, and
	// a _filter expression in the address.
	traffic.step("patient list")
	run(t, ctx, chromedp.SendKeys(chromedp.CSS(`header input[placeholder=Search]`), "Carol"))
	waitJS(t, ctx, "the header search's answer", `[...document.querySelectorAll("[role=option]")].some(e => e.innerText.includes("Carol Smithers"))`)
	shot(t, ctx, "app-search")
	run(t, ctx, chromedp.Navigate(app.url+"Patient"))
	waitRows(t, ctx, "Alice Smith", "Bob Jones", "Carol Smithers")
	columnMenu(t, ctx, "Name", "Contains...")
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`[role=dialog] input[name=filter-value]`)),
		chromedp.SendKeys(chromedp.CSS(`[role=dialog] input[name=filter-value]`), "smi"))
	clickText(t, ctx, `[role=dialog] button`, "OK")
	waitRows(t, ctx, "Alice Smith", "Carol Smithers")
	shot(t, ctx, "app-patients-filtered")
	columnMenu(t, ctx, "Name", "Sort Z to A")
	waitRows(t, ctx, "Carol Smithers", "Alice Smith")
	shot(t, ctx, "app-patients-sorted")
	run(t, ctx, chromedp.Navigate(app.url+`Patient?_filter=gender%20eq%20female%20and%20name%20co%20%22ers%22`))
	waitRows(t, ctx, "Carol Smithers")

	// Open a Patient, edit, save.
	traffic.step("edit patient")
	clickText(t, ctx, `table tbody td`, "Carol Smithers")
	waitJS(t, ctx, "Carol's page", `/^\/Patient\/[0-9a-f-]+/.test(location.pathname) && mainText().includes("Carol Smithers")`)
	carol := strings.Split(evalJS[string](t, ctx, `location.pathname`), "/")[2]
	clickText(t, ctx, `main a`, "Edit")
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`input[name="name.0-family"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="name.0-family"]`), "-Jones"))
	shot(t, ctx, "app-patient-edit")
	run(t, ctx, chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the saved Patient", `mainText().includes("Carol Smithers-Jones")`)
	r := do(t, "GET", "fhir/R4/Patient/"+carol, adaAPI, "", nil)
	expect(t, r, 200)
	if !strings.Contains(string(r.body), `"family":"Smithers-Jones"`) {
		t.Fatalf("Carol after the edit: %s", r.body)
	}

	// A new Patient from the form: a coded field (gender, from the value
	// set's expansion) and a photo uploaded as an attachment.
	traffic.step("new patient")
	photo := filepath.Join(t.TempDir(), "photo.png")
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAAAGklEQVR4nGNk+M9AEmAiTfmohlENoxqGlAYAVVIBHx7xKFcAAAAASUVORK5CYII=")
	if err := os.WriteFile(photo, png, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(app.url+"Patient/new"), chromedp.WaitVisible(chromedp.CSS(`input[name=gender]`)))
	clickText(t, ctx, `main button`, "Add Name")
	run(t, ctx,
		chromedp.WaitVisible(chromedp.CSS(`input[name="name.0-given"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="name.0-given"]`), "Dana"),
		chromedp.SendKeys(chromedp.CSS(`input[name="name.0-family"]`), "Form"),
		chromedp.Click(chromedp.CSS(`input[name=gender]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=gender]`), "fem"),
		chromedp.WaitVisible(chromedp.CSS(`[role=option][value=female]`)),
		chromedp.Click(chromedp.CSS(`[role=option][value=female]`)),
		chromedp.SetUploadFiles(chromedp.CSS(`input[data-testid=upload-file-input]`), []string{photo}))
	// The photo shows: its URL is Pinion's, absolute, and loads without a
	// bearer token.
	waitJS(t, ctx, "the uploaded photo shown in the form", `[...document.querySelectorAll("main img")].some(i =>
		i.src.startsWith(`+jsString(app.pinion[0])+`) && i.complete && i.naturalWidth === 16)`)
	shot(t, ctx, "app-patient-new")
	run(t, ctx, chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the new Patient's page", `/^\/Patient\/[0-9a-f-]+$/.test(location.pathname) && mainText().includes("Dana Form")`)
	dana := strings.Split(evalJS[string](t, ctx, `location.pathname`), "/")[2]
	shot(t, ctx, "app-patient-created")
	r = do(t, "GET", "fhir/R4/Patient/"+dana, adaAPI, "", nil)
	expect(t, r, 200)
	created := r.json(t)
	photos, _ := created["photo"].([]any)
	if created["gender"] != "female" || len(photos) != 1 {
		t.Fatalf("the new Patient: %s", r.body)
	}

	// The project's admin pages.
	traffic.step("admin: project")
	run(t, ctx, chromedp.Navigate(app.url+"admin/project"))
	waitJS(t, ctx, "the project page", `mainText().includes(`+jsString(pid)+`)`)
	shot(t, ctx, "app-admin-project")

	traffic.step("admin: invite")
	const bea = "bea-app@example.com"
	run(t, ctx, chromedp.Navigate(app.url+"admin/invite"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=firstName]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=firstName]`), "Bea"),
		chromedp.SendKeys(chromedp.CSS(`input[name=lastName]`), "Browser"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), bea))
	shot(t, ctx, "app-admin-invite")
	run(t, ctx, chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the invitation's answer", `mainText().includes("User created")`)
	shot(t, ctx, "app-admin-invited")
	beaMembership := strings.TrimPrefix(evalJS[string](t, ctx,
		`[...document.querySelectorAll("main a")].find(a => a.innerText.includes("new membership")).getAttribute("href")`), "/ProjectMembership/")

	traffic.step("admin: edit membership")
	run(t, ctx, chromedp.Navigate(app.url+"admin/users"))
	clickText(t, ctx, `main td`, bea)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`input[name=admin]`)))
	if got := evalJS[string](t, ctx, `location.pathname`); got != "/admin/members/"+beaMembership {
		t.Fatalf("the users list opened %s, want Bea's membership %s", got, beaMembership)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`input[name=admin]`)), chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the membership saved", `mainText().includes("User updated")`)
	shot(t, ctx, "app-admin-membership")
	r = do(t, "GET", "fhir/R4/ProjectMembership/"+beaMembership, adaAPI, "", nil)
	expect(t, r, 200)
	if r.json(t)["admin"] != true {
		t.Fatalf("Bea's membership after the edit: %s", r.body)
	}

	traffic.step("admin: remove user")
	run(t, ctx, chromedp.Navigate(app.url+"admin/members/"+beaMembership), chromedp.WaitVisible(chromedp.CSS(`input[name=admin]`)))
	// The page asks with window.confirm; the person says yes.
	evalJS[any](t, ctx, `window.confirm = () => true`)
	clickText(t, ctx, `main button`, "Remove user")
	waitJS(t, ctx, "the project page after the removal", `location.pathname === "/admin/project"`)
	expect(t, do(t, "GET", "fhir/R4/ProjectMembership/"+beaMembership, adaAPI, "", nil), 410)

	traffic.step("admin: new client")
	run(t, ctx, chromedp.Navigate(app.url+"admin/clients/new"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "Lab feed"),
		chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the client created", `mainText().includes("Client created")`)
	clickText(t, ctx, `main a`, "Go to new client")
	waitJS(t, ctx, "the client's page", `/^\/ClientApplication\/[0-9a-f-]+/.test(location.pathname) && mainText().includes("Lab feed")`)
	client := strings.Split(evalJS[string](t, ctx, `location.pathname`), "/")[2]
	r = do(t, "GET", "fhir/R4/ClientApplication/"+client, adaAPI, "", nil)
	expect(t, r, 200)
	secret, _ := r.json(t)["secret"].(string)
	if secret == "" {
		t.Fatalf("the project's admin reads no secret of the new client: %s", r.body)
	}
	// The secret is shown to the project's admin on the client's page, at
	// the press of its Show button.
	run(t, ctx, chromedp.Navigate(app.url+"ClientApplication/"+client+"/details"),
		chromedp.WaitVisible(chromedp.CSS(`main button[aria-label="Show secret"]`)),
		chromedp.Click(chromedp.CSS(`main button[aria-label="Show secret"]`)))
	waitJS(t, ctx, "the client's secret", `mainText().includes(`+jsString(secret)+`)`)
	shot(t, ctx, "app-admin-client")

	traffic.step("admin: new bot")
	run(t, ctx, chromedp.Navigate(app.url+"admin/bots/new"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=name]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "Lab importer"),
		chromedp.Click(chromedp.CSS(`main button[type=submit]`)))
	waitJS(t, ctx, "the bot created", `mainText().includes("Bot created")`)
	bot := evalJS[string](t, ctx, `[...document.querySelectorAll("main a")].find(a => a.innerText.includes("new bot")).getAttribute("href")`)
	run(t, ctx, chromedp.Navigate(app.url+strings.TrimPrefix(bot, "/")+"/editor"))
	// The code panes load from Medplum's website; the buttons are the app's.
	waitJS(t, ctx, "the bot editor", `["Save", "Deploy", "Execute"].every(l => [...document.querySelectorAll("main button")].some(b => b.innerText.trim() === l))`)
	shot(t, ctx, "app-bot-editor")

	// The Security page lists Ada's sessions; she revokes the one elsewhere.
	traffic.step("security")
	run(t, ctx, chromedp.Navigate(app.url+"security"))
	waitJS(t, ctx, "the sessions", `[...document.querySelectorAll("main tr")].some(r => r.innerText.includes("curl"))`)
	shot(t, ctx, "app-security")
	expect(t, do(t, "GET", "auth/me", elsewhere, "", nil), 200)
	evalJS[any](t, ctx, `[...document.querySelectorAll("main tr")].find(r => r.innerText.includes("curl")).querySelector("a").click()`)
	waitJS(t, ctx, "the session gone from the list", `![...document.querySelectorAll("main tr")].some(r => r.innerText.includes("curl"))`)
	expect(t, do(t, "GET", "auth/me", elsewhere, "", nil), 401)

	// Sign out: the app forgets the login and Pinion ends the token.
	traffic.step("sign out")
	browserToken := evalJS[string](t, ctx, `JSON.parse(localStorage["@medplum:activeLogin"]).accessToken`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`button[aria-label="User menu"]`)))
	clickText(t, ctx, `[role=menuitem]`, "Sign out")
	waitJS(t, ctx, "the sign-in page", `location.pathname === "/signin" && !!document.querySelector("input[name=email]")`)
	shot(t, ctx, "app-signed-out")
	expect(t, do(t, "GET", "auth/me", browserToken, "", nil), 401)
}

// medplumApp is Medplum's web app served on its own loopback origin,
// pointed at a Pinion stack of the test's own.
type medplumApp struct {
	url    string   // the app, with a trailing slash
	pinion []string // the prefixes of requests that go to Pinion
}

// startMedplumApp starts Pinion as `make run` does (the default rate limit
// and body size), answering CORS for the app's origin, and serves the app
// with its serve.sh pointed at it.
func startMedplumApp(t *testing.T) medplumApp {
	t.Helper()
	dir, err := filepath.Abs(medplumAppDir)
	if err != nil {
		t.Fatal(err)
	}
	serve := filepath.Join(dir, "serve.sh")
	if _, err := os.Stat(serve); err != nil {
		t.Skipf("no Medplum web app at %s (it is outside the repository, in ../shared/medplum-app from its root): %v", dir, err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("serve.sh needs python3: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	appAddr := l.Addr().String()
	l.Close()
	appURL := "http://" + appAddr + "/"

	st := parallelStack(t, map[string]string{
		"PINION_APP_BASE_URL":    appURL,
		"PINION_AUTH_RATE_LIMIT": "", // the defaults, as make run has them
		"PINION_MAX_BODY_BYTES":  "",
	})
	pinionURL := config.DeriveBaseURL(st.Addr) // what make run derives
	_, port, _ := net.SplitHostPort(appAddr)
	cmd := exec.Command(serve, port, pinionURL)
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", serve, err)
	}
	t.Cleanup(func() {
		// serve.sh execs its server, which removes its copy on SIGTERM.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	served := waitUntil(30*time.Second, func() bool {
		var resp *http.Response
		if resp, err = client.Get(appURL + "signin"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !served {
		t.Fatalf("the app is not served at %s: %v", appURL, err)
	}
	return medplumApp{url: appURL, pinion: []string{pinionURL, baseFor(t)}}
}

// pinionTraffic records, from the browser's network events, every request
// the page makes to Pinion that fails: a status of 400 or more, or no
// answer at all.
type pinionTraffic struct {
	prefixes []string
	bodies   chan network.RequestID
	pending  sync.WaitGroup

	mu      sync.Mutex
	current string
	sent    map[network.RequestID]*pinionRequest
	failed  []*pinionRequest
}

// pinionRequest is one request to Pinion, as the browser saw it.
type pinionRequest struct {
	step, method, url string
	status            int64
	problem, body     string
}

func recordPinionTraffic(t *testing.T, ctx context.Context, prefixes []string) *pinionTraffic {
	t.Helper()
	p := &pinionTraffic{prefixes: prefixes, bodies: make(chan network.RequestID, 256), sent: map[network.RequestID]*pinionRequest{}}
	err := chromedp.Listen(ctx, func(ev any) {
		// This runs in the tab's message loop: record, and leave reading
		// bodies (a command) to the goroutine below.
		p.mu.Lock()
		defer p.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			for _, pre := range p.prefixes {
				if strings.HasPrefix(e.Request.URL, pre) {
					p.sent[e.RequestID] = &pinionRequest{step: p.current, method: e.Request.Method, url: e.Request.URL}
				}
			}
		case *network.EventResponseReceived:
			if r := p.sent[e.RequestID]; r != nil && e.Response.Status >= 400 {
				r.status = e.Response.Status
				p.failed = append(p.failed, r)
			}
		case *network.EventLoadingFinished:
			if r := p.sent[e.RequestID]; r != nil && r.status >= 400 {
				p.pending.Add(1)
				select {
				case p.bodies <- e.RequestID:
				default:
					p.pending.Done()
				}
			}
		case *network.EventLoadingFailed:
			// A request the page itself dropped (it navigated away) is
			// not Pinion failing.
			if r := p.sent[e.RequestID]; r != nil && !e.Canceled {
				r.problem = e.ErrorText
				if e.CorsErrorStatus != nil {
					r.problem += " (CORS: " + string(e.CorsErrorStatus.CorsError) + ")"
				}
				if r.status == 0 {
					p.failed = append(p.failed, r)
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for id := range p.bodies {
			res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
			p.mu.Lock()
			if r := p.sent[id]; r != nil {
				if err != nil {
					r.body = "(body not read: " + err.Error() + ")"
				} else {
					r.body = outcomeOf(res.Body)
				}
			}
			p.mu.Unlock()
			p.pending.Done()
		}
	}()
	t.Cleanup(func() { close(p.bodies) })
	// Registered last, so it runs first: the list is reported whether the
	// walk ended or stopped at a step, while the browser can still give
	// the bodies.
	t.Cleanup(func() { p.check(t) })
	return p
}

// step names what the requests from now on are for, in the report.
func (p *pinionTraffic) step(name string) {
	p.mu.Lock()
	p.current = name
	p.mu.Unlock()
}

// check fails the test with every failed request to Pinion so far.
func (p *pinionTraffic) check(t *testing.T) {
	t.Helper()
	p.pending.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failed) == 0 {
		return
	}
	var out strings.Builder
	for _, r := range p.failed {
		fmt.Fprintf(&out, "\n  [%s] %s %s: ", r.step, r.method, r.url)
		if r.status != 0 {
			fmt.Fprintf(&out, "%d %s", r.status, r.body)
		} else {
			out.WriteString(r.problem)
		}
	}
	t.Errorf("%d requests from the app to Pinion failed:%s", len(p.failed), out.String())
}

// outcomeOf is the text of an OperationOutcome body, or the body itself,
// shortened.
func outcomeOf(body []byte) string {
	var oo struct {
		ResourceType string `json:"resourceType"`
		Issue        []struct {
			Diagnostics string `json:"diagnostics"`
			Details     struct {
				Text string `json:"text"`
			} `json:"details"`
		} `json:"issue"`
	}
	if json.Unmarshal(body, &oo) == nil && oo.ResourceType == "OperationOutcome" {
		var texts []string
		for _, i := range oo.Issue {
			texts = append(texts, strings.TrimSpace(i.Details.Text+" "+i.Diagnostics))
		}
		return "OperationOutcome: " + strings.Join(texts, "; ")
	}
	if len(body) > 300 {
		body = append(body[:300:300], "..."...)
	}
	return string(body)
}

// withMainText defines mainText(), the text of the page's main element
// ("" while the app has none), for expr.
func withMainText(expr string) string {
	return `(() => { const mainText = () => document.querySelector("main")?.innerText ?? ""; return (` + expr + `); })()`
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// evalJS evaluates a JavaScript expression in the page.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return get(t, ctx, chromedp.Evaluate[T](withMainText(expr)))
}

// waitJS waits until a JavaScript condition holds in the page, and says
// what it waited for, with the page's text, when it does not.
func waitJS(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Poll[bool](withMainText("!!("+cond+")"),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		page := evalJS[string](t, ctx, `location.href + "\n" + document.body.innerText`)
		t.Fatalf("waiting for %s: %v\npage: %s", what, err, page)
	}
}

// clickText clicks the first element matching sel whose text is text,
// once there is one.
func clickText(t *testing.T, ctx context.Context, sel, text string) {
	t.Helper()
	find := fmt.Sprintf(`[...document.querySelectorAll(%s)].find(e => e.innerText.trim() === %s)`, jsString(sel), jsString(text))
	waitJS(t, ctx, fmt.Sprintf("%q in %s", text, sel), find)
	evalJS[any](t, ctx, find+`.click()`)
}

// columnMenu opens a column's menu in the search control and picks an item.
func columnMenu(t *testing.T, ctx context.Context, column, item string) {
	t.Helper()
	clickText(t, ctx, `th button`, column)
	clickText(t, ctx, `[role=menuitem]`, item)
}

// waitRows waits until the search control's table lists exactly these
// names, in this order.
func waitRows(t *testing.T, ctx context.Context, names ...string) {
	t.Helper()
	want := jsString(strings.Join(names, "|"))
	waitJS(t, ctx, "rows "+strings.Join(names, ", "), `[...document.querySelectorAll("table tbody tr")].map(r => {
		const n = [...r.querySelectorAll("td")].map(td => td.innerText.trim()).find(s => /^[A-Z][a-z]+ [A-Z]/.test(s));
		return n || "";
	}).filter(s => s).join("|") === `+want)
}
