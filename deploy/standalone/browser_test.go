package standalone

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// screenshotDir keeps each page's screenshots for a reviewer (git-ignored).
const screenshotDir = "screenshots"

// newBrowser starts a headless Chromium for one test. Without one the test
// is skipped, saying why: .ci/run installs it and checks it is there, so CI
// never skips.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// The first run starts the browser, which lives as long as ctx: no
	// timeout here, one per step instead (see run).
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// get runs one browser action that gives a value, bounded in time.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// run runs browser steps in order.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	get(t, ctx, chromedp.Steps(steps...))
}

// shot saves the page as it looks on a desktop and on a phone.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, size := range []struct {
		suffix string
		w, h   int64
		opts   []chromedp.EmulateViewportOption
	}{{"desktop", 1280, 900, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile, chromedp.EmulateTouch}}} {
		run(t, ctx, chromedp.EmulateViewport(size.w, size.h, size.opts...))
		png := get(t, ctx, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(screenshotDir, name+"-"+size.suffix+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, chromedp.EmulateViewport(1280, 900))
}

// pageText is the visible text of the page's main element.
func pageText(t *testing.T, ctx context.Context) string {
	t.Helper()
	return get(t, ctx, chromedp.Text(chromedp.CSS("main")))
}

// waitText waits until the page's main element holds want, and returns
// its text. After a click that submits a form, the page being left may
// still answer, or go in the middle of a read ("Cannot find context"):
// each read is retried until the new page says it, up to 20 s.
func waitText(t *testing.T, ctx context.Context, want string) string {
	t.Helper()
	var text string
	said := waitUntil(20*time.Second, func() bool {
		s, err := tryGet(ctx, chromedp.Text(chromedp.CSS("main")))
		if err != nil {
			return false
		}
		text = s
		return strings.Contains(s, want)
	})
	if !said {
		t.Fatalf("the page never said %q; it says: %s", want, text)
	}
	return text
}

// localLink points a link from an e-mail (made with the configured base
// URL) at the test's server.
func localLink(link string) string {
	i := strings.Index(link, "setpassword/")
	return base + link[i:]
}

// The invitation story in a browser: the link from the e-mail opens a page
// that checks the link, refuses a bad form beside the field, sets the
// password, and is spent afterwards; the reset page sends a new link.
func TestSetPasswordInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Browser clinic")
	bea := "bea-" + pid + "@example.com" // a new person each run
	link := invitedLink(t, su, pid, "Bea", bea)
	m := link[len(base):]

	// The page's headers: no framing, no sniffing, no caching, no referrer,
	// and a policy that loads nothing but its own style.
	resp, err := client.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for h, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
		"Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy: %q", csp)
	}
	if c := resp.Header.Get("Set-Cookie"); !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") {
		t.Errorf("Set-Cookie: %q", c)
	}

	// A form posted without this browser's token changes nothing.
	jar := &http.Client{Timeout: 10 * time.Second}
	form := url.Values{"password": {"forged password"}, "confirm": {"forged password"}, "csrf": {"not-the-token"}}
	req, _ := http.NewRequest("POST", link, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", resp.Header.Get("Set-Cookie"))
	forged, err := jar.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	forged.Body.Close()
	if forged.StatusCode != 403 {
		t.Fatalf("forged form: %d", forged.StatusCode)
	}

	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("password")))
	shot(t, ctx, "setpassword")
	if text := pageText(t, ctx); !strings.Contains(text, "Set your password") || !strings.Contains(text, "At least 8 characters") {
		t.Fatalf("page: %s", text)
	}

	// Passwords that differ: the page says so beside the second field.
	run(t, ctx, submitPasswords("bea's password", "something else"), chromedp.WaitVisible(chromedp.ID("confirm-error")))
	shot(t, ctx, "setpassword-mismatch")
	if get(t, ctx, chromedp.AttributeValue(chromedp.ID("confirm"), "aria-invalid")).Value != "true" || !strings.Contains(pageText(t, ctx), "The passwords do not match") {
		t.Fatalf("mismatch page: %s", pageText(t, ctx))
	}

	// The password is set; the person signs in with it.
	run(t, ctx, submitPasswords("bea's password", "bea's password"), chromedp.WaitNotPresent(chromedp.ID("password")))
	shot(t, ctx, "setpassword-done")
	if text := pageText(t, ctx); !strings.Contains(text, "Password set") {
		t.Fatalf("after setting: %s", text)
	}
	signIn(t, bea, "bea's password", "", "openid")

	// The link is spent.
	run(t, ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("main")))
	shot(t, ctx, "setpassword-used")
	if text := pageText(t, ctx); !strings.Contains(text, "Link already used") || !strings.Contains(text, "Ask for a new link") {
		t.Fatalf("spent link: %s", text)
	}

	// The reset page sends a new link, which works.
	run(t, ctx, chromedp.Navigate(base+"resetpassword"), chromedp.WaitVisible(chromedp.ID("email")))
	shot(t, ctx, "resetpassword")
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("email"), bea),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitNotPresent(chromedp.ID("email")))
	shot(t, ctx, "resetpassword-sent")
	if text := pageText(t, ctx); !strings.Contains(text, "Check your e-mail") {
		t.Fatalf("after reset: %s", text)
	}
	var fresh string
	eventually(t, 15*time.Second, "a new link after the reset", func() bool {
		for _, l := range setPasswordLink.FindAllString(allMailTo(t, bea), -1) {
			if l != m {
				fresh = l
			}
		}
		return fresh != ""
	})
	run(t, ctx, chromedp.Navigate(localLink(fresh)), chromedp.WaitVisible(chromedp.ID("password")))
	// The same link with a wrong secret is not valid.
	wrong := localLink(fresh)
	wrong = wrong[:len(wrong)-4] + "0000"
	run(t, ctx, chromedp.Navigate(wrong), chromedp.WaitVisible(chromedp.CSS("main")))
	if text := pageText(t, ctx); !strings.Contains(text, "Link not valid") {
		t.Fatalf("wrong secret: %s", text)
	}
}

// invitedLink invites a new person by e-mail into a project and returns
// the set-password link from the e-mail, pointed at the test's server.
func invitedLink(t *testing.T, tok, pid, firstName, email string) string {
	t.Helper()
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", tok, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", firstName, "lastName", "Browser", "email", email)), 200)
	m := setPasswordLink.FindString(mailTo(t, email))
	if m == "" {
		t.Fatal("no set-password link in the invitation")
	}
	return localLink(m)
}

// submitPasswords fills in the set-password form and sends it.
func submitPasswords(password, confirm string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.SendKeys(chromedp.ID("confirm"), confirm),
		chromedp.Click(chromedp.CSS("button")))
}

// allMailTo is every e-mail written so far to an address, joined.
func allMailTo(t *testing.T, addr string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "mail", "*.eml"))
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), "<"+addr+">") {
			out.WriteString(strings.ReplaceAll(string(b), "=\r\n", ""))
		}
	}
	return out.String()
}
