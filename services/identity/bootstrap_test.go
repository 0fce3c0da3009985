package identity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// The first start creates the super-admin project, a client with a
// generated secret and an admin membership, writes what it generated to
// the data directory (for no one else to read) and says it created it;
// the client's secret works at once.
func TestBootstrapFirstStart(t *testing.T) {
	ctx := context.Background()
	b := live.svc.SuperAdmin
	if !b.Created || b.ProjectID != clients.SuperAdminProjectID || uuid.Validate(b.ClientID) != nil || len(b.Secret) < auth.MinSecretLength {
		t.Fatalf("bootstrap %+v", b)
	}
	path := filepath.Join(live.cfg.DataDir, clients.SuperAdminFile)
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, info, err)
	}
	data, _ := os.ReadFile(path)
	want := fmt.Sprintf("{\n  \"clientId\": %q,\n  \"clientSecret\": %q,\n  \"projectId\": %q\n}\n", b.ClientID, b.Secret, clients.SuperAdminProjectID)
	if string(data) != want {
		t.Fatalf("%s:\n%s\nwant\n%s", path, data, want)
	}
	project, err := live.conns.Repo.Read(ctx, repo.AllProjects, "Project", clients.SuperAdminProjectID)
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := project.Decode(); doc["superAdmin"] != true || doc["strictMode"] != true || doc["name"] != "Super Admin" {
		t.Fatalf("project %v", doc)
	}
	m, err := live.conns.Sessions.GetMembership(ctx, clients.SuperAdminMembershipID("ClientApplication/"+b.ClientID))
	if err != nil || !m.SuperAdmin || !m.Admin || !m.Active || m.Profile != "ClientApplication/"+b.ClientID || m.Project != clients.SuperAdminProjectID {
		t.Fatalf("session membership %+v %v", m, err)
	}
	resp, err := live.svc.oauth.Basic(ctx, &bus.Request{Body: []byte(`{"id":"` + b.ClientID + `","secret":"` + b.Secret + `"}`)})
	// One login per client and membership, the same at every start.
	login := uuid.NewSHA1(account.IDNamespace, []byte("client-login:"+b.ClientID+":"+clients.SuperAdminMembershipID("ClientApplication/"+b.ClientID))).String()
	if body := decoded(t, resp, err, 200); body["loginId"] != login {
		t.Fatalf("basic %v, want login %s", body, login)
	}
}

// A restart finds what the first start made: the same client (named by
// the file), no new secret, the same signing key.
func TestBootstrapRestart(t *testing.T) {
	s := another(t, live.svc.cfg)
	want := clients.SuperAdmin{ClientID: live.svc.SuperAdmin.ClientID, ProjectID: clients.SuperAdminProjectID}
	if s.SuperAdmin != want {
		t.Fatalf("after a restart %+v, want %+v", s.SuperAdmin, want)
	}
	if s.oauth.Signer().Key.ID != live.svc.oauth.Signer().Key.ID || !s.oauth.Signer().Key.Private.Equal(live.svc.oauth.Signer().Key.Private) {
		t.Fatalf("a restart made a new signing key: %s, was %s", s.oauth.Signer().Key.ID, live.svc.oauth.Signer().Key.ID)
	}
	data, _ := os.ReadFile(filepath.Join(live.cfg.DataDir, clients.SuperAdminFile))
	if !strings.Contains(string(data), live.svc.SuperAdmin.Secret) {
		t.Fatal("a restart rewrote the credentials file")
	}
}

// A configured client id and secret make that client; changing the
// configured secret rotates it at the next start, at once (no grace), and
// nothing is written to the data directory.
func TestBootstrapConfiguredSecretRotates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	id := uuid.NewString()
	first, second := auth.NewSecret(), auth.NewSecret()
	check := func(s *Service, secret string, status int) {
		t.Helper()
		_, err := s.oauth.Basic(ctx, &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`), Remote: "10.9.0.1"})
		if got := fhir.AsError(err).Status; err == nil && status != 200 || err != nil && got != status {
			t.Fatalf("secret: %v, want %d", err, status)
		}
	}
	cfg := Config{BaseURL: testBase, DataDir: dir, SuperAdminClientID: id, SuperAdminSecret: first, SecretGrace: time.Hour}
	s1 := New(cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
	b, err := s1.clients.BootstrapSuperAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b != (clients.SuperAdmin{ClientID: id, Secret: first, ProjectID: clients.SuperAdminProjectID}) {
		t.Fatalf("bootstrap %+v", b)
	}
	check(s1, first, 200)

	cfg.SuperAdminSecret = second
	s2 := New(cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
	if _, err := s2.clients.BootstrapSuperAdmin(ctx); err != nil {
		t.Fatal(err)
	}
	check(s2, second, 200)
	check(s2, first, 401)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("configured credentials were written: %v", entries)
	}
}

// Without a data directory nothing is remembered: each start without a
// configured client makes a new one, and shows its secret.
func TestBootstrapWithoutDataDir(t *testing.T) {
	s := New(Config{BaseURL: testBase}, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
	b, err := s.clients.BootstrapSuperAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !b.Created || b.Secret == "" || b.ClientID == live.svc.SuperAdmin.ClientID {
		t.Fatalf("bootstrap %+v", b)
	}
}

// ensure leaves an existing resource as it is.
func TestEnsureKeepsWhatExists(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Kept")
	before, err := live.conns.Repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		t.Fatal(err)
	}
	err = live.svc.clients.Ensure(ctx, "Project", project, map[string]any{"resourceType": "Project", "name": "Replaced"}, project)
	if err != nil {
		t.Fatal(err)
	}
	res, err := live.conns.Repo.Read(ctx, repo.AllProjects, "Project", project)
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := res.Decode(); doc["name"] != "Kept" || res.VersionID != before.VersionID {
		t.Fatalf("%v, version %s, was %s", doc, res.VersionID, before.VersionID)
	}
}
