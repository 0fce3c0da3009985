package identity

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
)

// The menus Medplum 5.0.10 builds (packages/server/src/auth/me.ts), as JSON.
const (
	favoritesMenu = `{"title":"Favorites","link":[{"name":"Patient","target":"/Patient"},{"name":"Practitioner","target":"/Practitioner"},
		{"name":"Organization","target":"/Organization"},{"name":"ServiceRequest","target":"/ServiceRequest"},
		{"name":"DiagnosticReport","target":"/DiagnosticReport"},{"name":"Questionnaire","target":"/Questionnaire"}]}`
	adminMenu = `{"title":"Admin","link":[{"name":"Project","target":"/admin/project"},{"name":"AccessPolicy","target":"/AccessPolicy"},
		{"name":"Subscriptions","target":"/Subscription"},{"name":"Batch","target":"/batch"},{"name":"Config","target":"/admin/config"}]}`
	superAdminsAdminMenu = `{"title":"Admin","link":[{"name":"Project","target":"/admin/project"},{"name":"AccessPolicy","target":"/AccessPolicy"},
		{"name":"Subscriptions","target":"/Subscription"},{"name":"Batch","target":"/batch"}]}`
	superAdminMenu = `{"title":"Super Admin","link":[{"name":"Projects","target":"/Project"},{"name":"Super Config","target":"/admin/super"},
		{"name":"Super AsyncJob","target":"/admin/super/asyncjob"},{"name":"Super DB","target":"/admin/super/db"}]}`
)

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// meOf is /auth/me for a person's membership.
func meOf(t *testing.T, p person) map[string]any {
	t.Helper()
	resp, err := live.svc.signins.Me(context.Background(), &bus.Request{Principal: &bus.Principal{
		User: p.user, Profile: p.profile, Project: p.project, Membership: p.membership, LoginID: uuid.NewString()}})
	return decoded(t, resp, err, 200)
}

// /auth/me's config: the membership's UserConfiguration, else the default
// menu Medplum builds for a member, an admin, and the super-admin project.
func TestMeConfig(t *testing.T) {
	ctx := context.Background()
	superProject := uuid.NewString()
	if _, err := live.conns.Repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "Super", "superAdmin": true},
		repo.WriteOptions{ID: superProject, Project: superProject}); err != nil {
		t.Fatal(err)
	}
	inSuper := func(name string, admin bool) person {
		p := newPerson(t, name)
		p.project = superProject
		p.profile = newPractitioner(t, superProject, "Su", name)
		p.membership = newMembership(t, superProject, p.user, p.profile, map[string]any{"admin": admin})
		return p
	}
	admin := newPerson(t, "me-config-admin")
	setMembership(t, admin.membership, func(m map[string]any) { m["admin"] = true })
	for _, tc := range []struct {
		name string
		p    person
		menu string
	}{
		{"a member", newPerson(t, "me-config-member"), "[" + favoritesMenu + "]"},
		{"an admin", admin, "[" + favoritesMenu + "," + adminMenu + "]"},
		{"a super admin", inSuper("me-config-super", true), "[" + favoritesMenu + "," + superAdminsAdminMenu + "," + superAdminMenu + "]"},
		{"a member of the super-admin project", inSuper("me-config-super-member", false), "[" + favoritesMenu + "," + superAdminMenu + "]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]any{"resourceType": "UserConfiguration", "menu": jsonValue(t, tc.menu)}
			if got := meOf(t, tc.p)["config"]; !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				t.Fatalf("config %s, want %s", g, tc.menu)
			}
		})
	}

	t.Run("the membership's own", func(t *testing.T) {
		p := newPerson(t, "me-config-own")
		menu := jsonValue(t, `[{"title":"Charts","link":[{"name":"Patients","target":"/Patient"}]}]`)
		ref := newResource(t, p.project, map[string]any{"resourceType": "UserConfiguration", "name": "charts", "menu": menu})
		setMembership(t, p.membership, func(m map[string]any) { m["userConfiguration"] = map[string]any{"reference": ref} })
		got := meOf(t, p)["config"].(map[string]any)
		if "UserConfiguration/"+got["id"].(string) != ref || got["name"] != "charts" || !reflect.DeepEqual(got["menu"], menu) {
			t.Fatalf("config %v", got)
		}
		// Without a menu of its own it gets the default one.
		bare := newResource(t, p.project, map[string]any{"resourceType": "UserConfiguration", "name": "bare"})
		setMembership(t, p.membership, func(m map[string]any) { m["userConfiguration"] = map[string]any{"reference": bare} })
		got = meOf(t, p)["config"].(map[string]any)
		if got["name"] != "bare" || !reflect.DeepEqual(got["menu"], jsonValue(t, "["+favoritesMenu+"]")) {
			t.Fatalf("config %v", got)
		}
		// Another project's configuration is not shown.
		other := newResource(t, newProject(t, "Elsewhere"), map[string]any{"resourceType": "UserConfiguration", "name": "elsewhere"})
		setMembership(t, p.membership, func(m map[string]any) { m["userConfiguration"] = map[string]any{"reference": other} })
		if got := meOf(t, p)["config"]; !reflect.DeepEqual(got, map[string]any{"resourceType": "UserConfiguration",
			"menu": jsonValue(t, "["+favoritesMenu+"]")}) {
			t.Fatalf("config %v", got)
		}
	})
}

const (
	chromeOnWindows = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	firefoxOnLinux  = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
)

// signInFrom signs a person in with /auth/login from an address and a
// browser, and returns the login id.
func signInFrom(t *testing.T, p person, remote, userAgent string) string {
	t.Helper()
	r := jsonRequest(remote, map[string]any{"email": p.email, "password": p.password,
		"codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"})
	r.Header["User-Agent"] = userAgent
	resp, err := live.svc.signins.Login(context.Background(), r)
	body := decoded(t, resp, err, 200)
	if body["code"] == nil {
		t.Fatalf("login answer %v", body)
	}
	return body["login"].(string)
}

// /auth/me's security: the person's live sessions with where they came
// from, and their active memberships in this project, cut down.
func TestMeSecurity(t *testing.T) {
	ctx := context.Background()
	p, other := newPerson(t, "me-security"), newPerson(t, "me-security-other")
	first := signInFrom(t, p, "203.0.113.7", chromeOnWindows)
	second := signInFrom(t, p, "2001:db8::1", firefoxOnLinux)
	revoked := signInFrom(t, p, "203.0.113.8", chromeOnWindows)
	signInFrom(t, other, "203.0.113.9", chromeOnWindows)
	r := jsonRequest("", map[string]any{"loginId": revoked})
	r.Principal = &bus.Principal{User: p.user}
	if _, err := live.svc.signins.AuthRevoke(ctx, r); err != nil {
		t.Fatal(err)
	}
	// More memberships of the person: another active one in this project,
	// an inactive one, and one in another project.
	second2 := newPractitioner(t, p.project, "Ada", "second")
	active := newMembership(t, p.project, p.user, second2, map[string]any{"admin": true,
		"identifier": []any{map[string]any{"system": "x", "value": "y"}}})
	newMembership(t, p.project, p.user, newPractitioner(t, p.project, "Ada", "gone"), map[string]any{"active": false})
	elsewhere := newProject(t, "Elsewhere")
	newMembership(t, elsewhere, p.user, newPractitioner(t, elsewhere, "Ada", "elsewhere"), nil)

	sec := meOf(t, p)["security"].(map[string]any)
	sessions := sec["sessions"].([]any)
	if len(sessions) != 2 {
		t.Fatalf("sessions %v", sessions)
	}
	want := []map[string]any{
		{"id": second, "authMethod": "password", "remoteAddress": "2001:db8::1", "browser": "Firefox", "os": "Linux"},
		{"id": first, "authMethod": "password", "remoteAddress": "203.0.113.7", "browser": "Chrome", "os": "Windows"},
	}
	for i, s := range sessions {
		s := s.(map[string]any)
		at, err := time.Parse(time.RFC3339, s["lastUpdated"].(string))
		if err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
			t.Fatalf("session %d lastUpdated %v %v", i, s["lastUpdated"], err)
		}
		delete(s, "lastUpdated")
		if !reflect.DeepEqual(s, want[i]) {
			t.Fatalf("session %d %v, want %v", i, s, want[i])
		}
	}
	if sec["mfaEnrolled"] != false {
		t.Fatalf("mfaEnrolled %v", sec["mfaEnrolled"])
	}
	byID := map[string]any{}
	for _, m := range sec["memberships"].([]any) {
		byID[m.(map[string]any)["id"].(string)] = m
	}
	wantMembers := map[string]any{
		p.membership: map[string]any{"resourceType": "ProjectMembership", "id": p.membership,
			"profile": map[string]any{"reference": p.profile, "display": "Profile of " + p.user}},
		active: map[string]any{"resourceType": "ProjectMembership", "id": active, "admin": true,
			"identifier": []any{map[string]any{"system": "x", "value": "y"}},
			"profile":    map[string]any{"reference": second2, "display": "Profile of " + p.user}},
	}
	if !reflect.DeepEqual(byID, wantMembers) {
		t.Fatalf("memberships %v, want %v", byID, wantMembers)
	}

	// A user who enrolled a second factor says so.
	res, err := live.conns.Repo.Read(ctx, repo.AllProjects, "User", p.userID)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := res.Decode()
	u["mfaEnrolled"] = true
	if _, err := live.conns.Repo.Update(ctx, repo.AllProjects, u, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	me := meOf(t, p)
	if sec := me["security"].(map[string]any); sec["mfaEnrolled"] != true {
		t.Fatalf("mfaEnrolled %v", sec["mfaEnrolled"])
	}
	if user := me["user"].(map[string]any); user["mfaEnrolled"] != nil || strings.Join(sortedKeys(user), ",") != "email,id,resourceType" {
		t.Fatalf("user %v", user)
	}
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
