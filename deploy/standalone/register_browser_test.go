package standalone

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// The verification e-mail's link in a browser, on a desktop and a phone:
// the page asks for a click (opening it verifies nothing), verifies once,
// and a second use says so.
func TestVerifyEmailInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	email := "vbrowser-" + uuid.NewString()[:8] + "@example.com"
	registered(t, "Vic", email, "a long password", "")
	m := verifyLink.FindString(mailTo(t, email))
	if m == "" {
		t.Fatal("no verification link in the e-mail")
	}
	link := base + m

	run(t, ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("button")))
	if text := pageText(t, ctx); !strings.Contains(text, "Confirm that this e-mail address is yours.") {
		t.Fatalf("page: %s", text)
	}
	shot(t, ctx, "verifyemail")
	run(t, ctx, chromedp.Click(chromedp.CSS("button")))
	waitText(t, ctx, "Your e-mail address is verified.")
	shot(t, ctx, "verifyemail-done")

	run(t, ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("button")), chromedp.Click(chromedp.CSS("button")))
	waitText(t, ctx, "This address is verified already.")
}
