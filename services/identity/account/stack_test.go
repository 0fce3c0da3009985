package account

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/secrets"
	"github.com/pinion-health/pinion/services/identity/web"
)

// live is the accounts service on real parts (testkit.Open), its invite
// steps running; the package's tests share it.
var live struct {
	svc   *Service
	conns *infra.Conns
	kit   *testkit.Stack
}

const testBase = testkit.Base

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	kit, stop, err := testkit.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := kit.Conns
	sec := secrets.New(c.Repo)
	svc := New(Config{BaseURL: testBase}, c.NC, c.JS, c.Repo, sec, c.Sessions, web.New(testBase, sec), testkit.Quiet)
	stopSteps, err := svc.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accounts:", err)
		return 1
	}
	defer stopSteps()
	live.svc, live.conns, live.kit = svc, c, kit
	return m.Run()
}

func newProject(t *testing.T, name string) string { return live.kit.Project(t, name) }

func newEmail(name string) string { return testkit.Email(name) }

func newPractitioner(t *testing.T, project, given, family string) string {
	return live.kit.Practitioner(t, project, given, family)
}

func newMembership(t *testing.T, project, user, profile string, extra map[string]any) string {
	return live.kit.Membership(t, project, user, profile, extra)
}

func newResource(t *testing.T, project string, res map[string]any) string {
	return live.kit.Resource(t, project, res)
}

func jsonRequest(remote string, body any) *bus.Request { return testkit.JSON(remote, body) }

func decoded(t *testing.T, resp *bus.Response, err error, status int) map[string]any {
	t.Helper()
	return testkit.Decoded(t, resp, err, status)
}

func expectOutcome(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	testkit.Outcome(t, err, status, text, expr)
}

func mustHash(t *testing.T, password string) string { return testkit.Hash(t, password) }

func lastMail(t *testing.T) (mail.Message, bool) { return live.kit.LastMail(t) }

func mailTo(t *testing.T, to string) mail.Message { return live.kit.MailTo(t, to) }

func linkIn(t *testing.T, text string) (id, secret string) { return testkit.LinkIn(t, text) }

// newUser stores a user with this e-mail and password (none when empty),
// scoped to project when it is set, as an invite would, and returns its id.
func newUser(t *testing.T, email, password, project string) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	req := invite.Request{FirstName: "Ada", LastName: "Lovelace", Email: email}
	if password != "" {
		req.PasswordHash = mustHash(t, password)
	}
	if err := live.svc.CreateUser(ctx, id, project, req); err != nil {
		t.Fatal(err)
	}
	if owner, err := live.conns.Repo.Claim(ctx, repo.UserEmailKey(project, email), id); err != nil || owner != id {
		t.Fatalf("claim %s: %q %v", email, owner, err)
	}
	return id
}

// person is a user with a password and one membership, in a project of
// its own, with a practitioner profile.
type person struct {
	email, password  string
	userID, user     string // id, and User/<id>
	project, profile string
	membership       string
}

func newPerson(t *testing.T, name string) person {
	t.Helper()
	p := person{email: newEmail(name), password: "correct horse " + name}
	p.project = newProject(t, "Clinic of "+name)
	p.profile = newPractitioner(t, p.project, "Ada", name)
	p.userID = newUser(t, p.email, p.password, "")
	p.user = "User/" + p.userID
	p.membership = newMembership(t, p.project, p.user, p.profile, nil)
	return p
}

func formRequest(form url.Values, header map[string]string) *bus.Request {
	return testkit.Form(form, header)
}

// aBrowser is a browser that has its cookie, and its forms' token.
func aBrowser(t *testing.T) (b web.Browser, csrf string, header map[string]string) {
	t.Helper()
	b = web.NewBrowser()
	b.IsNew = false
	csrf, err := live.svc.pages.CSRFToken(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return b, csrf, map[string]string{"Cookie": web.Cookie + "=" + b.ID}
}
