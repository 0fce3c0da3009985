package membership

import (
	"context"
	"encoding/json"
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

// testBaseURL is the service's public address in these tests.
const testBaseURL = "https://pinion.test/"

// testStack is the service on real parts, started once for the package: an
// in-process NATS server with JetStream, SQLite in a temporary directory
// behind the repository, the session buckets and their projector, the
// invite records, and e-mails written as .eml files.
type testStack struct {
	svc      *Service
	nc       *nats.Conn
	js       jetstream.JetStream
	repo     *repo.Repo
	sessions *session.Store
	invites  *invite.Store
	store    *interferingStore
	steps    *scriptedSteps
	mailDir  string
}

var stack *testStack

func TestMain(m *testing.M) {
	goflag.Parse() // for testing.Verbose
	code, err := runWithStack(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "membership test stack:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// runWithStack starts the stack, runs the tests and stops it again.
func runWithStack(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "membership-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		quiet = slog.Default()
	}

	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: filepath.Join(dir, "nats"), NoListen: true})
	if err != nil {
		return 0, err
	}
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	// As infra.Open makes it: the projector reads membership changes from it.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: infra.ResourceStream, Subjects: []string{bus.EventPrefix + ">"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return 0, err
	}
	sessions, err := session.Open(ctx, js, session.Config{})
	if err != nil {
		return 0, err
	}
	st, err := sqlstore.Open(ctx, filepath.Join(dir, "pinion.db"), sqlstore.Options{Sync: "off", Log: quiet})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	is := &interferingStore{Store: st}
	r, err := repo.New(is, nc, repo.Options{JS: js, Log: quiet})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	p, err := projects.StartProjector(ctx, nc, js, infra.ResourceStream, r, sessions, quiet)
	if err != nil {
		return 0, err
	}
	defer p.Stop()

	mailDir := filepath.Join(dir, "mail")
	svc := New(Config{BaseURL: testBaseURL, Mailer: mail.Files{Dir: mailDir}}, nc, js, r, sessions, quiet)
	if err := svc.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = svc.Stop(sctx)
	}()
	steps := &scriptedSteps{repo: r, scripts: map[string]stepScript{}, seen: map[string]string{}}
	stopSteps, err := steps.start(ctx, svc.invites, nc, js, quiet)
	if err != nil {
		return 0, err
	}
	defer stopSteps()

	stack = &testStack{svc: svc, nc: nc, js: js, repo: r, sessions: sessions, invites: svc.invites,
		store: is, steps: steps, mailDir: mailDir}
	return m.Run(), nil
}

// interferingStore is the SQLite store with another writer in the room:
// when armed for a project, it stores a version of that project of its own
// (a description naming the attempt) just before each of the next writes of
// it, so the write finds the version it replaces gone, as it would after
// another process's write whose event has not arrived yet.
type interferingStore struct {
	store.Store
	mu       sync.Mutex
	project  string
	left     int // interfering writes still to make
	attempts int // writes of the project seen while armed
}

// interfere arms the store for the next n writes of the project.
func (s *interferingStore) interfere(t *testing.T, projectID string, n int) {
	t.Helper()
	s.mu.Lock()
	s.project, s.left, s.attempts = projectID, n, 0
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		s.project, s.left = "", 0
		s.mu.Unlock()
	})
}

// writesSeen is how many writes of the armed project were attempted.
func (s *interferingStore) writesSeen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

func (s *interferingStore) Write(ctx context.Context, ws ...*store.Write) error {
	s.mu.Lock()
	for _, w := range ws {
		if s.project == "" || w.Type != "Project" || w.ID != s.project || w.Prev == "" {
			continue
		}
		s.attempts++
		if s.left == 0 {
			continue
		}
		s.left--
		if err := s.otherWriter(ctx, w.ID, s.attempts); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()
	return s.Store.Write(ctx, ws...)
}

// otherWriter stores a new version of a project behind the repository's back.
func (s *interferingStore) otherWriter(ctx context.Context, id string, attempt int) error {
	cur, err := s.Store.Get(ctx, "Project", id)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(cur.JSON, &doc); err != nil {
		return err
	}
	vid := uuid.NewString()
	doc["description"] = fmt.Sprintf("written by another process before attempt %d", attempt)
	doc["meta"].(map[string]any)["versionId"] = vid
	b, _ := json.Marshal(doc)
	return s.Store.Write(ctx, &store.Write{
		Record: store.Record{Type: "Project", ID: id, Version: vid, Time: time.Now().UTC().Truncate(time.Millisecond), Project: cur.Project, JSON: b},
		Prev:   cur.Version,
	})
}

// scriptedSteps stands in for the invite saga's user and profile steps,
// which belong to the identity and fhir services: for each invitee (by
// e-mail, else externalId) the test says which user and profile those
// steps ended with, or how they failed. The membership step and the
// e-mail that follow are this service's own, run by its own consumers.
type scriptedSteps struct {
	repo    *repo.Repo
	mu      sync.Mutex
	scripts map[string]stepScript
	seen    map[string]string // invitee → id of the last invite of them
}

// stepScript is what the user, profile and e-mail steps do for one invitee.
type stepScript struct {
	UserID         string
	Profile        string // "": the invite's own profile, else a new one
	NewUser        bool
	SetPasswordURL string // the e-mail step's link for a new user
	Err            error  // the user step fails with it, for good
	Hold           bool   // the steps never finish
}

// script sets what the steps do for an invitee.
func (s *scriptedSteps) script(invitee string, sc stepScript) {
	s.mu.Lock()
	s.scripts[invitee] = sc
	s.mu.Unlock()
}

// lastInvite is the id of the last invite of an invitee the steps saw.
func (s *scriptedSteps) lastInvite(t *testing.T, invitee string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.seen[invitee]
	if id == "" {
		t.Fatalf("no invite of %s reached the saga", invitee)
	}
	return id
}

func (s *scriptedSteps) start(ctx context.Context, invites *invite.Store, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (func(), error) {
	step := func(ctx context.Context, data []byte) error {
		_, rec, pending, err := invites.Load(ctx, data)
		if err != nil || !pending {
			return err
		}
		invitee := rec.Request.Email
		if invitee == "" {
			invitee = rec.Request.ExternalID
		}
		s.mu.Lock()
		sc, ok := s.scripts[invitee]
		s.seen[invitee] = rec.ID
		s.mu.Unlock()
		switch {
		case !ok:
			return saga.Permanent(fmt.Errorf("no script for invitee %q", invitee))
		case sc.Hold:
			return nil
		case sc.Err != nil:
			return saga.Permanent(sc.Err)
		}
		profile := sc.Profile
		if profile == "" {
			if profile, err = s.profile(ctx, rec); err != nil {
				return err
			}
		}
		if _, err := invites.Update(ctx, rec.ID, func(r *invite.Record) error {
			r.UserID, r.NewUser, r.ProfileRef = sc.UserID, sc.NewUser, profile
			invite.MarkStep(r, invite.StepUser, "done", "")
			invite.MarkStep(r, invite.StepProfile, "done", "")
			return nil
		}); err != nil {
			return err
		}
		return invites.Next(ctx, invite.SubjMembership, invite.Message{InviteID: rec.ID})
	}
	dead := func(ctx context.Context, data []byte, err error) {
		invite.Fail(ctx, invites, nc, data, invite.StepUser, err, log)
	}
	stopUser, err := saga.Consume(ctx, js, "membership-test-user-and-profile", invite.SubjUser, step, dead, log)
	if err != nil {
		return nil, err
	}
	// Identity's e-mail step: the invitation, with the script's link.
	email := func(ctx context.Context, data []byte) error {
		_, rec, _, err := invites.Load(ctx, data)
		if err != nil || rec.Status != "done" || rec.Steps[invite.StepEmail].State != "pending" {
			return err
		}
		s.mu.Lock()
		sc := s.scripts[rec.Request.Email]
		s.mu.Unlock()
		if err := mail.Queue(ctx, js, mail.Invitation(rec, sc.SetPasswordURL, testBaseURL)); err != nil {
			return err
		}
		invite.Announce(nc, rec.ID, rec)
		return nil
	}
	deadEmail := func(ctx context.Context, data []byte, err error) {
		invite.Fail(ctx, invites, nc, data, invite.StepEmail, err, log)
	}
	stopEmail, err := saga.Consume(ctx, js, "membership-test-email", invite.SubjEmail, email, deadEmail, log)
	if err != nil {
		stopUser()
		return nil, err
	}
	return func() { stopUser(); stopEmail() }, nil
}

// profile is the profile step's answer when the script names none: the
// profile the invite named, else a new one in the project, named as invited.
func (s *scriptedSteps) profile(ctx context.Context, rec *invite.Record) (string, error) {
	req := rec.Request
	if req.Profile != "" {
		return req.Profile, nil
	}
	p := map[string]any{"resourceType": req.ResourceType,
		"name": []any{map[string]any{"given": []any{req.FirstName}, "family": req.LastName}}}
	if req.Patient != "" {
		p["patient"] = map[string]any{"reference": req.Patient}
	}
	res, err := s.repo.Create(ctx, repo.Scope{Project: req.ProjectID}, p, repo.WriteOptions{})
	if err != nil {
		return "", err
	}
	return res.Type + "/" + res.ID, nil
}

// Principals.

func superAdmin() *bus.Principal {
	return &bus.Principal{User: "User/super", Profile: "Practitioner/super", Project: "super-project", SuperAdmin: true}
}

func adminOf(projectID string) *bus.Principal {
	return &bus.Principal{User: "User/admin-of-" + projectID, Profile: "Practitioner/admin-of-" + projectID, Project: projectID, Admin: true}
}

func memberOf(projectID string) *bus.Principal {
	return &bus.Principal{User: "User/member-of-" + projectID, Profile: "Practitioner/member-of-" + projectID, Project: projectID}
}

// Requests.

// request is a request as the gateway hands it on.
func request(p *bus.Principal, params map[string]string, contentType, body string) *bus.Request {
	h := map[string]string{}
	if contentType != "" {
		h["Content-Type"] = contentType
	}
	return &bus.Request{Method: "POST", Params: params, Header: h, Body: []byte(body), Principal: p}
}

// fhirJSON is a request with a FHIR JSON body.
func fhirJSON(p *bus.Principal, params map[string]string, body string) *bus.Request {
	return request(p, params, "application/fhir+json", body)
}

// call runs a handler as the bus would, with a deadline.
func call(t *testing.T, h bus.Handler, r *bus.Request) (*bus.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return h(ctx, r)
}

// mustCall runs a handler that must answer with status.
func mustCall(t *testing.T, h bus.Handler, r *bus.Request, status int) map[string]any {
	t.Helper()
	resp, err := call(t, h, r)
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if resp.Status != status {
		t.Fatalf("status %d, want %d: %s", resp.Status, status, resp.Body)
	}
	return decode(t, string(resp.Body))
}

// Fixtures, written through the repository as other services write them.

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixtureProject stores a project (which belongs to itself) and returns its id.
func fixtureProject(t *testing.T, fields map[string]any) string {
	t.Helper()
	id := uuid.NewString()
	p := map[string]any{"resourceType": "Project", "name": "Clinic " + id[:8], "strictMode": true}
	for k, v := range fields {
		p[k] = v
	}
	if _, err := stack.repo.Create(testCtx(t), repo.AllProjects, p, repo.WriteOptions{ID: id, Project: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

// fixtureUser stores a user holding its e-mail's claim, scoped to a project
// or ("") to the server, and returns its id.
func fixtureUser(t *testing.T, projectID, email string) string {
	t.Helper()
	ctx := testCtx(t)
	u := map[string]any{"resourceType": "User", "firstName": "Ada", "lastName": "Lovelace", "email": email}
	if projectID != "" {
		u["project"] = map[string]any{"reference": "Project/" + projectID}
	}
	res, err := stack.repo.Create(ctx, repo.AllProjects, u, repo.WriteOptions{Project: projectID})
	if err != nil {
		t.Fatal(err)
	}
	if owner, err := stack.repo.Claim(ctx, repo.UserEmailKey(projectID, email), res.ID); err != nil || owner != res.ID {
		t.Fatalf("claim %s: %q %v", email, owner, err)
	}
	return res.ID
}

// fixture stores a resource in a project and returns its reference.
func fixture(t *testing.T, projectID string, res map[string]any) string {
	t.Helper()
	out, err := stack.repo.Create(testCtx(t), repo.Scope{Project: projectID}, res, repo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.Type + "/" + out.ID
}

func fixturePractitioner(t *testing.T, projectID string) string {
	return fixture(t, projectID, map[string]any{"resourceType": "Practitioner", "name": []any{map[string]any{"family": "Lovelace"}}})
}

func fixturePolicy(t *testing.T, projectID string) string {
	return fixture(t, projectID, map[string]any{"resourceType": "AccessPolicy", "name": "read-only",
		"resource": []any{map[string]any{"resourceType": "Patient", "readonly": true}}})
}

// fixtureMember stores a membership as an invite makes it (its claim
// held, its session entry projected) and returns its id.
func fixtureMember(t *testing.T, projectID, userRef, profileRef string, fields map[string]any) string {
	t.Helper()
	ctx := testCtx(t)
	id := uuid.NewString()
	m := map[string]any{
		"resourceType": "ProjectMembership",
		"project":      map[string]any{"reference": "Project/" + projectID},
		"user":         map[string]any{"reference": userRef},
		"profile":      map[string]any{"reference": profileRef},
		"admin":        false,
	}
	for k, v := range fields {
		m[k] = v
	}
	if _, err := stack.repo.Claim(ctx, repo.MembershipKey(projectID, userRef), id); err != nil {
		t.Fatal(err)
	}
	if ext, _ := m["externalId"].(string); ext != "" {
		if _, err := stack.repo.Claim(ctx, repo.ExternalIDKey(projectID, ext), id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stack.repo.Create(ctx, repo.AllProjects, m, repo.WriteOptions{ID: id, Project: projectID}); err != nil {
		t.Fatal(err)
	}
	if _, err := projects.Project(ctx, stack.nc, "ProjectMembership", id, projectID); err != nil {
		t.Fatal(err)
	}
	return id
}

// Reading back.

// readDoc reads a resource as stored.
func readDoc(t *testing.T, typ, id string) map[string]any {
	t.Helper()
	res, err := stack.repo.Read(testCtx(t), repo.AllProjects, typ, id)
	if err != nil {
		t.Fatalf("read %s/%s: %v", typ, id, err)
	}
	return decode(t, string(res.JSON))
}

// membersOf lists the memberships of a project, by user.
func membersOf(t *testing.T, projectID string) map[string][]map[string]any {
	t.Helper()
	q, err := search.Parse("ProjectMembership", url.Values{"project": {"Project/" + projectID}, "_count": {"100"}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := stack.repo.Search(testCtx(t), repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, res := range page.Resources {
		m := decode(t, string(res.JSON))
		user, _ := refOf(m["user"])
		out[user] = append(out[user], m)
	}
	return out
}

// projectsNamed counts the projects with a name, to tell that a refused
// create wrote nothing.
func projectsNamed(t *testing.T, name string) int {
	t.Helper()
	q, err := search.Parse("Project", url.Values{"name:exact": {name}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := stack.repo.Search(testCtx(t), repo.AllProjects, "Project", q)
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Resources)
}

// sessionEntry reads a membership's entry in the session bucket; nil when
// there is none.
func sessionEntry(t *testing.T, id string) *session.Membership {
	t.Helper()
	m, err := stack.sessions.GetMembership(testCtx(t), id)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return m
}

func isNotFound(err error) bool { return errors.Is(err, session.ErrNotFound) }

// wantSessionRev checks that a response waits for the memberships bucket
// to reach at least the revision of the entry it changed.
func wantSessionRev(t *testing.T, resp *bus.Response) {
	t.Helper()
	bucket, rev, ok := resp.Session()
	if !ok || bucket != session.MembershipsBucket || rev == 0 {
		t.Errorf("session dependency %q %d %v, want %s at a revision", bucket, rev, ok, session.MembershipsBucket)
	}
}

// wantFHIRError checks a handler's refusal.
func wantFHIRError(t *testing.T, resp *bus.Response, err error, status int, text, expr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("answered %d %s, want %d %q", resp.Status, resp.Body, status, text)
	}
	wantError(t, err, status, text, expr)
}

// waitInvite waits until an invite's record satisfies done, following the
// record's changes in its bucket.
func waitInvite(t *testing.T, id string, done func(*invite.Record) bool) *invite.Record {
	t.Helper()
	ctx := testCtx(t)
	kv, err := stack.js.KeyValue(ctx, invite.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last *invite.Record
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue // the initial values are in
			}
			rec := &invite.Record{}
			if err := json.Unmarshal(e.Value(), rec); err != nil {
				t.Fatal(err)
			}
			if last = rec; done(rec) {
				return rec
			}
		case <-ctx.Done():
			t.Fatalf("invite %s: still %+v", id, last)
		}
	}
}
