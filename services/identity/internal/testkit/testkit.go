// Package testkit is what the identity service's packages' tests share:
// real parts started once per package (an embedded NATS server reached
// in-process, the session buckets, the SQLite store and the session
// projector), and the helpers that make projects, people and requests.
// It is imported only by tests.
package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
)

// Base is the base URL the tests' services run under.
const Base = "https://pinion.example/"

// Quiet keeps the services' logs out of the test output.
var Quiet = slog.New(slog.DiscardHandler)

// Stack is the real parts a package's tests share.
type Stack struct {
	Conns *infra.Conns
	Dir   string // a temporary directory, removed by the stop Open returns
}

// Open starts the parts; stop ends them. A TestMain runs its tests
// between the two.
func Open() (s *Stack, stop func(), err error) {
	dir, err := os.MkdirTemp("", "identity-test-")
	if err != nil {
		return nil, nil, err
	}
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: filepath.Join(dir, "nats"), NoListen: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("nats: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := infra.Open(ctx, infra.Options{InProcess: ns, Name: "identity-test", SQLitePath: filepath.Join(dir, "pinion.db"), SQLiteSync: "off", Log: Quiet})
	if err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("infra: %w", err)
	}
	// The audit trail's writer, which the fhir service runs in a deployment.
	stopAudit, err := audit.NewWriter(c.Repo, c.JS, Quiet).Start(ctx)
	if err != nil {
		c.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("audit writer: %w", err)
	}
	return &Stack{Conns: c, Dir: dir}, func() {
		stopAudit()
		c.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
	}, nil
}

// Project stores a project and returns its id.
func (s *Stack) Project(t *testing.T, name string) string {
	t.Helper()
	id := uuid.NewString()
	if _, err := s.Conns.Repo.Create(context.Background(), repo.AllProjects, map[string]any{"resourceType": "Project", "name": name},
		repo.WriteOptions{ID: id, Project: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

// SetProject changes a stored project.
func (s *Stack) SetProject(t *testing.T, id string, edit func(map[string]any)) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Conns.Repo.Read(ctx, repo.AllProjects, "Project", id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := res.Decode()
	if err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if _, err := s.Conns.Repo.Update(ctx, repo.AllProjects, doc, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Email is an address no other test uses.
func Email(name string) string {
	return name + "-" + uuid.NewString()[:8] + "@example.com"
}

// Resource stores a resource in a project and returns its reference.
func (s *Stack) Resource(t *testing.T, project string, res map[string]any) string {
	t.Helper()
	r, err := s.Conns.Repo.Create(context.Background(), repo.Scope{Project: project}, res, repo.WriteOptions{Project: project})
	if err != nil {
		t.Fatal(err)
	}
	return r.Type + "/" + r.ID
}

// Practitioner stores a practitioner with a name and returns its reference.
func (s *Stack) Practitioner(t *testing.T, project, given, family string) string {
	t.Helper()
	return s.Resource(t, project, map[string]any{"resourceType": "Practitioner",
		"name": []any{map[string]any{"given": []any{given}, "family": family}}})
}

// Membership stores a membership of user in project as profile (extra
// fields added), waits for its session entry and returns its id.
func (s *Stack) Membership(t *testing.T, project, user, profile string, extra map[string]any) string {
	t.Helper()
	m := map[string]any{"resourceType": "ProjectMembership",
		"project": map[string]any{"reference": "Project/" + project, "display": "Project " + project[:4]},
		"user":    map[string]any{"reference": user},
		"profile": map[string]any{"reference": profile, "display": "Profile of " + user},
	}
	for k, v := range extra {
		m[k] = v
	}
	ref := s.Resource(t, project, m)
	id := strings.TrimPrefix(ref, "ProjectMembership/")
	s.Project1(t, "ProjectMembership", id, project)
	return id
}

// Project1 waits until the session entries a resource feeds hold it.
func (s *Stack) Project1(t *testing.T, typ, id, project string) {
	t.Helper()
	if _, err := projects.Project(context.Background(), s.Conns.NC, typ, id, project); err != nil {
		t.Fatal(err)
	}
}

// SetMembership changes a stored membership and waits for its entry.
func (s *Stack) SetMembership(t *testing.T, id string, edit func(map[string]any)) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Conns.Repo.Read(ctx, repo.AllProjects, "ProjectMembership", id)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := res.Decode()
	if err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if _, err := s.Conns.Repo.Update(ctx, repo.AllProjects, doc, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Project1(t, "ProjectMembership", id, res.Project)
}

// LastMail is the newest e-mail queued for the mail step, and whether
// there is one.
func (s *Stack) LastMail(t *testing.T) (mail.Message, bool) {
	t.Helper()
	ctx := context.Background()
	st, err := s.Conns.JS.Stream(ctx, saga.Stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, mail.Subject)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return mail.Message{}, false
		}
		t.Fatal(err)
	}
	var m mail.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m, true
}

// MailTo is the newest queued e-mail, which must be to this address.
func (s *Stack) MailTo(t *testing.T, to string) mail.Message {
	t.Helper()
	m, ok := s.LastMail(t)
	if !ok || m.To != to {
		t.Fatalf("no e-mail to %s; the last is %+v", to, m)
	}
	return m
}

// KeyValue reads a bucket's entry; nil when there is none.
func (s *Stack) KeyValue(t *testing.T, bucket, key string) []byte {
	t.Helper()
	ctx := context.Background()
	kv, err := s.Conns.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return e.Value()
}

// LinkIn is the set-password link in a text, as id and secret.
func LinkIn(t *testing.T, text string) (id, secret string) {
	t.Helper()
	i := strings.Index(text, Base+"setpassword/")
	if i < 0 {
		t.Fatalf("no set-password link in %q", text)
	}
	rest := strings.Fields(text[i+len(Base+"setpassword/"):])[0]
	id, secret, ok := strings.Cut(rest, "/")
	if !ok {
		t.Fatalf("link %q", rest)
	}
	return id, secret
}

// JSON is a JSON POST from remote.
func JSON(remote string, body any) *bus.Request {
	b, _ := json.Marshal(body)
	return &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": "application/json"}, Body: b, Remote: remote}
}

// Form is a form POST with these headers added.
func Form(form url.Values, header map[string]string) *bus.Request {
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for k, v := range header {
		h[k] = v
	}
	return &bus.Request{Method: "POST", Header: h, Body: []byte(form.Encode())}
}

// Decoded is a JSON answer's body, after checking its status.
func Decoded(t *testing.T, resp *bus.Response, err error, status int) map[string]any {
	t.Helper()
	if err != nil {
		t.Fatalf("%v, want %d", err, status)
	}
	var out map[string]any
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		t.Fatalf("%d %s: %v", resp.Status, resp.Body, err)
	}
	if resp.Status != status {
		t.Fatalf("%d %s, want %d", resp.Status, resp.Body, status)
	}
	return out
}

// Outcome checks that err is an OperationOutcome of this status and
// text, naming expr (none when ""); status 0 wants no error.
func Outcome(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	if status == 0 {
		if err != nil {
			t.Fatalf("%v, want no error", err)
		}
		return
	}
	fe := fhir.AsError(err)
	if err == nil || fe.Status != status || fe.Message() != text {
		t.Fatalf("%v, want %d %q", err, status, text)
	}
	got := ""
	if i := fe.Outcome.Issue[0]; len(i.Expression) > 0 {
		got = i.Expression[0]
	}
	if got != expr {
		t.Fatalf("expression %q, want %q", got, expr)
	}
}

// Hash hashes a password for a test's user.
func Hash(t *testing.T, password string) string {
	t.Helper()
	h, err := auth.HashPassword(context.Background(), password)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Invite records a pending invite of req, as the membership service
// starts one, and returns its id and the message of its user step.
func Invite(t *testing.T, store *invite.Store, req invite.Request) (id string, msg []byte) {
	t.Helper()
	id = uuid.NewString()
	rec := invite.NewRecord(id, req, time.Now().UTC())
	if err := store.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	msg, _ = json.Marshal(invite.Message{InviteID: id})
	return id, msg
}

// JWKSServer serves a client's key set on loopback: body's bytes with
// status; the count is how many times it was fetched.
func JWKSServer(t *testing.T, status int, body func() []byte) (string, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(status)
		_, _ = w.Write(body())
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/jwks.json", &hits
}

// KeySetJSON is keys as a JWK Set.
func KeySetJSON(t *testing.T, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RFC 7636 Appendix B's example pair.
const (
	RFCVerifier  = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	RFCChallenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
)

// TokenError checks an answer of the token endpoint: RFC 6749
// §5.2's shape, 401 with a Basic challenge for invalid_client.
func TokenError(t *testing.T, resp *bus.Response, status int, code, text string) {
	t.Helper()
	var body map[string]string
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	if resp.Status != status || body["error"] != code || body["error_description"] != text || len(body) != 2 {
		t.Fatalf("%d %s, want %d %s %q", resp.Status, resp.Body, status, code, text)
	}
	wantChallenge := ""
	if status == 401 {
		wantChallenge = `Basic realm="token"`
	}
	if got := resp.Header["WWW-Authenticate"]; got != wantChallenge {
		t.Fatalf("WWW-Authenticate %q, want %q", got, wantChallenge)
	}
	if resp.Header["Cache-Control"] != "no-store" || resp.Header["Content-Type"] != bus.JSONContentType {
		t.Fatalf("headers %v", resp.Header)
	}
}
