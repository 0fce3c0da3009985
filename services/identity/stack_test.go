package identity

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// live is the identity service started as a process starts it (FromConfig,
// Start) on real parts (testkit.Open): an embedded NATS server reached
// in-process, the session buckets, the SQLite store and the session
// projector. The package's tests share it; each makes its own projects,
// users and clients.
var live struct {
	svc   *Service
	conns *infra.Conns
	cfg   *config.Config
	kit   *testkit.Stack
}

// quiet keeps the services' logs out of the test output.
var quiet = testkit.Quiet

func TestMain(m *testing.M) { os.Exit(runWithStack(m)) }

func runWithStack(m *testing.M) int {
	kit, stop, err := testkit.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Client key sets are served from loopback in these tests.
	cfg := &config.Config{BaseURL: testBase, DataDir: kit.Dir, AccessTokenLifetime: 10 * time.Minute, ClientSecretGrace: time.Hour, EgressPrivate: true}
	svc, err := FromConfig(cfg, kit.Conns, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "identity:", err)
		return 1
	}
	if err := svc.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "identity start:", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	}()
	live.svc, live.conns, live.cfg, live.kit = svc, kit.Conns, cfg, kit
	return m.Run()
}

// another is a second identity instance on the live stack, as a second
// process would be, with its own caches; it is stopped after the test.
func another(t *testing.T, cfg Config) *Service {
	t.Helper()
	c := live.conns
	s := New(cfg, c.NC, c.JS, c.Repo, c.Sessions, quiet)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// newProject stores a project and returns its id.
func newProject(t *testing.T, name string) string { return live.kit.Project(t, name) }

// newEmail is an address no other test uses.
func newEmail(name string) string { return testkit.Email(name) }

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
	if err := live.svc.accounts.CreateUser(ctx, id, project, req); err != nil {
		t.Fatal(err)
	}
	if owner, err := live.conns.Repo.Claim(ctx, repo.UserEmailKey(project, email), id); err != nil || owner != id {
		t.Fatalf("claim %s: %q %v", email, owner, err)
	}
	return id
}

// newResource stores a resource in a project and returns its reference.
func newResource(t *testing.T, project string, res map[string]any) string {
	return live.kit.Resource(t, project, res)
}

// newPractitioner stores a practitioner with a name and returns its reference.
func newPractitioner(t *testing.T, project, given, family string) string {
	return live.kit.Practitioner(t, project, given, family)
}

// newMembership stores a membership of user in project as profile (extra
// fields added), waits for its session entry and returns its id.
func newMembership(t *testing.T, project, user, profile string, extra map[string]any) string {
	return live.kit.Membership(t, project, user, profile, extra)
}

// project1 waits until the session entries a resource feeds hold it.
func project1(t *testing.T, typ, id, project string) { live.kit.Project1(t, typ, id, project) }

// setMembership changes a stored membership and waits for its entry.
func setMembership(t *testing.T, id string, edit func(map[string]any)) {
	live.kit.SetMembership(t, id, edit)
}

// blockingPolicy stores an access policy that blocks one address and
// returns its reference.
func blockingPolicy(t *testing.T, project, address string) string {
	t.Helper()
	return newResource(t, project, map[string]any{"resourceType": "AccessPolicy", "name": "office only",
		"resource":     []any{map[string]any{"resourceType": "*"}},
		"ipAccessRule": []any{map[string]any{"name": "blocked", "value": address, "action": "block"}}})
}

// jsonRequest is a JSON POST from remote.
func jsonRequest(remote string, body any) *bus.Request { return testkit.JSON(remote, body) }

// formRequest is a form POST with these headers added.
func formRequest(form url.Values, header map[string]string) *bus.Request {
	return testkit.Form(form, header)
}

// decoded is a JSON answer's body, after checking its status.
func decoded(t *testing.T, resp *bus.Response, err error, status int) map[string]any {
	t.Helper()
	return testkit.Decoded(t, resp, err, status)
}

// lastMail is the newest e-mail queued for the mail step, and whether
// there is one.
func lastMail(t *testing.T) (mail.Message, bool) { return live.kit.LastMail(t) }

// mailTo is the newest queued e-mail, which must be to this address.
func mailTo(t *testing.T, to string) mail.Message { return live.kit.MailTo(t, to) }

// linkIn is the set-password link in a text, as id and secret.
func linkIn(t *testing.T, text string) (id, secret string) { return testkit.LinkIn(t, text) }

// keyValue reads a bucket's entry; nil when there is none.
func keyValue(t *testing.T, bucket, key string) []byte { return live.kit.KeyValue(t, bucket, key) }

// person is a user with a password and one membership, in a project of
// its own, with a practitioner profile.
type person struct {
	email, password     string
	userID, user        string // id, and User/<id>
	project, profile    string
	membership, display string
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

// login posts to /auth/login from remote, with these fields besides the
// person's e-mail and password.
func (p person) login(t *testing.T, remote string, fields map[string]any) (*bus.Response, error) {
	t.Helper()
	body := map[string]any{"email": p.email, "password": p.password}
	for k, v := range fields {
		body[k] = v
	}
	return live.svc.signins.Login(context.Background(), jsonRequest(remote, body))
}

// code signs the person in with PKCE (RFC 7636's pair) and returns the
// authorization code.
func (p person) code(t *testing.T, fields map[string]any) string {
	t.Helper()
	f := map[string]any{"codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"}
	for k, v := range fields {
		f[k] = v
	}
	resp, err := p.login(t, "10.1.0.1", f)
	body := decoded(t, resp, err, 200)
	code, _ := body["code"].(string)
	if !strings.HasPrefix(code, body["login"].(string)+".") {
		t.Fatalf("login answer %v", body)
	}
	return code
}

// token posts a form to the token endpoint.
func token(t *testing.T, form url.Values, header map[string]string) *bus.Response {
	t.Helper()
	resp, err := live.svc.oauth.Token(context.Background(), formRequest(form, header))
	if err != nil {
		t.Fatalf("the token endpoint failed: %v", err)
	}
	return resp
}

// redeem exchanges a code (with RFC 7636's verifier) for tokens.
func redeem(t *testing.T, code string) *bus.Response {
	t.Helper()
	return token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {rfcVerifier}}, nil)
}

// verify checks a token the live service signed, for audience.
func verify(t *testing.T, tok, audience string) *auth.Claims {
	t.Helper()
	v := live.svc.oauth.Verifier()
	v.Audience = audience
	v.RSAKeys = live.svc.oauth.IDTokenVerifier().RSAKeys // ID tokens (idtoken.go)
	c, err := v.Verify(tok)
	if err != nil {
		t.Fatalf("token for %s: %v", audience, err)
	}
	return c
}

// mustHash hashes a password for a test's user.
func mustHash(t *testing.T, password string) string { return testkit.Hash(t, password) }

// newInvite records a pending invite, as membership starts one.
func newInvite(t *testing.T, req invite.Request) (id string, msg []byte) {
	t.Helper()
	return testkit.Invite(t, live.svc.accounts.Invites(), req)
}

// RFC 7636's example pair, the PKCE of the tests' sign-ins.
const (
	rfcVerifier  = testkit.RFCVerifier
	rfcChallenge = testkit.RFCChallenge
)

// unwired is the service without NATS, sessions or a database: what it
// answers, it answers before looking anything up (a lookup would panic).
func unwired(t *testing.T) *Service {
	t.Helper()
	return New(Config{BaseURL: testBase}, nil, nil, nil, nil, nil)
}

// testBase is the base URL the tests' services run under.
const testBase = testkit.Base

// basic is an HTTP Basic Authorization header of "id:secret".
func basic(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
