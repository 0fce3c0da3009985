package bus

import (
	"strings"
	"testing"
)

// beforeRoutes is the route table as it was written by hand in
// pkg/bus/routes.go before the services declared their routes (commit
// 8d0eca4), in its order, with the handler each subject reached: the
// generated table must answer every path as it did.
var beforeRoutes = []struct {
	method, path, service, handler string
	auth                           AuthMode
	limited                        bool
}{
	{"GET", "/.well-known/jwks.json", "identity", "jwks", Public, false},
	{"GET", "/.well-known/openid-configuration", "identity", "discovery", Public, false},
	{"GET", "/.well-known/oauth-authorization-server", "identity", "discovery", Public, false},
	{"GET", "/.well-known/smart-configuration", "identity", "discovery", Public, false},
	{"GET", "/fhir/R4/.well-known/smart-configuration", "identity", "discovery", Public, false},
	{"POST", "/oauth2/token", "identity", "token", Public, true},
	{"POST", "/oauth2/revoke", "identity", "revoke", Public, true},
	{"POST", "/oauth2/introspect", "identity", "introspect", Public, true},
	{"GET", "/auth/me", "identity", "me", Token, false},
	{"POST", "/auth/login", "identity", "login", Public, true},
	{"POST", "/auth/profile", "identity", "chooseProfile", Public, true},
	{"POST", "/auth/setpassword", "identity", "setPassword", Public, true},
	{"POST", "/auth/resetpassword", "identity", "resetPassword", Public, true},
	{"POST", "/auth/revoke", "identity", "authRevoke", Token, false},
	{"POST", "/oauth2/logout", "identity", "logout", Optional, true},
	{"GET", "/oauth2/logout", "identity", "logout", Optional, true},
	{"GET", "/oauth2/userinfo", "identity", "userinfo", Token, false},
	{"POST", "/oauth2/userinfo", "identity", "userinfo", Token, false},
	{"GET", "/auth/consents", "identity", "listConsents", Token, false},
	{"DELETE", "/auth/consents/:clientId", "identity", "withdrawConsent", Token, false},
	{"GET", "/setpassword/:id/:secret", "identity", "setPasswordPage", Public, false},
	{"POST", "/setpassword/:id/:secret", "identity", "setPasswordPage", Public, true},
	{"GET", "/resetpassword", "identity", "resetPasswordPage", Public, false},
	{"POST", "/resetpassword", "identity", "resetPasswordPage", Public, true},
	{"GET", "/oauth2/authorize", "identity", "authorize", Public, false},
	{"POST", "/oauth2/authorize", "identity", "authorize", Public, true},
	{"POST", "/admin/Project", "membership", "createProject", Token, false},
	{"POST", "/admin/projects/:projectId/client", "identity", "createClient", Token, false},
	{"POST", "/admin/projects/:projectId/client/:clientId/$rotate-secret", "identity", "rotateSecret", Token, false},
	{"POST", "/admin/projects/:projectId/secrets", "membership", "setSecrets", Token, false},
	{"POST", "/admin/projects/:projectId/sites", "membership", "setSites", Token, false},
	{"POST", "/admin/projects/:projectId/invite", "membership", "invite", Token, false},
	{"POST", "/admin/projects/:projectId/bot", "botexec", "createBot", Token, false},
	{"GET", "/admin/projects/:projectId/members/:membershipId", "membership", "getMember", Token, false},
	{"POST", "/admin/projects/:projectId/members/:membershipId", "membership", "updateMember", Token, false},
	{"PATCH", "/admin/projects/:projectId/members/:membershipId", "membership", "patchMember", Token, false},
	{"DELETE", "/admin/projects/:projectId/members/:membershipId", "membership", "deleteMember", Token, false},
	{"GET", "/admin/projects/:projectId", "membership", "getProject", Token, false},
	{"GET", "/fhir/R4/metadata", "fhir", "capabilities", Public, false},
	{"POST", "/fhir/R4/Project/$init", "membership", "initProject", Token, false},
	{"POST", "/fhir/R4/Bot/$execute", "botexec", "execute", Token, false},
	{"GET", "/fhir/R4/Bot/$execute", "botexec", "execute", Token, false},
	{"POST", "/fhir/R4/Bot/:id/$execute", "botexec", "execute", Token, false},
	{"GET", "/fhir/R4/Bot/:id/$execute", "botexec", "execute", Token, false},
	{"POST", "/fhir/R4/Bot/:id/$deploy", "botexec", "deploy", Token, false},
	{"POST", "/fhir/R4/ClientApplication/:id/$rotate-secret", "identity", "rotateOperation", Token, false},
	{"GET", "/fhir/R4/Subscription/:id/$get-ws-binding-token", "identity", "wsBindingToken", Token, false},
	{"GET", "/fhir/R4/job/:id/status", "fhir", "jobStatus", Token, false},
	{"POST", "/fhir/R4/$export", "fhir", "export", Token, false},
	{"GET", "/fhir/R4/$export", "fhir", "export", Token, false},
	{"POST", "/fhir/R4/Patient/$export", "fhir", "export", Token, false},
	{"GET", "/fhir/R4/Patient/$export", "fhir", "export", Token, false},
	{"POST", "/fhir/R4/Group/:id/$export", "fhir", "export", Token, false},
	{"GET", "/fhir/R4/Group/:id/$export", "fhir", "export", Token, false},
	{"GET", "/fhir/R4/bulkdata/export/:id", "fhir", "exportStatus", Token, false},
	{"DELETE", "/fhir/R4/bulkdata/export/:id", "fhir", "exportCancel", Token, false},
	{"POST", "/fhir/R4", "fhir", "batch", Token, false},
	{"POST", "/fhir/R4/:type/$validate", "fhir", "validate", Token, false},
	{"POST", "/fhir/R4/:type/:id/$resend", "botexec", "subs.Resend", Token, false},
	{"PUT", "/fhir/R4/:type", "fhir", "update", Token, false},
	{"GET", "/fhir/R4/:type", "fhir", "search", Token, false},
	{"POST", "/fhir/R4/:type/_search", "fhir", "search", Token, false},
	{"POST", "/fhir/R4/:type", "fhir", "create", Token, false},
	{"GET", "/fhir/R4/:type/:id/_history/:vid", "fhir", "vread", Token, false},
	{"GET", "/fhir/R4/:type/:id/_history", "fhir", "history", Token, false},
	{"GET", "/fhir/R4/:type/:id", "fhir", "read", Token, false},
	{"PUT", "/fhir/R4/:type/:id", "fhir", "update", Token, false},
	{"PATCH", "/fhir/R4/:type/:id", "fhir", "patch", Token, false},
	{"DELETE", "/fhir/R4/:type/:id", "fhir", "delete", Token, false},
}

// moved names the handlers beforeRoutes names that have since moved into
// identity's subpackages (clients, consent, account, authserver, signin):
// the same code, reached by the same subject, under a new name.
var moved = map[string]string{
	"createClient":      "clients.Create",
	"rotateSecret":      "clients.RotateSecret",
	"rotateOperation":   "clients.RotateOperation",
	"listConsents":      "consents.List",
	"withdrawConsent":   "consents.Withdraw",
	"setPassword":       "accounts.SetPassword",
	"resetPassword":     "accounts.ResetPassword",
	"setPasswordPage":   "accounts.SetPasswordPage",
	"resetPasswordPage": "accounts.ResetPasswordPage",
	"jwks":              "oauth.JWKS",
	"discovery":         "oauth.Discovery",
	"token":             "oauth.Token",
	"revoke":            "oauth.Revoke",
	"introspect":        "oauth.Introspect",
	"userinfo":          "oauth.Userinfo",
	"wsBindingToken":    "oauth.WSBindingToken",
	"me":                "signins.Me",
	"login":             "signins.Login",
	"chooseProfile":     "signins.ChooseProfile",
	"authRevoke":        "signins.AuthRevoke",
	"logout":            "signins.Logout",
	"authorize":         "signins.Authorize",
}

// matchBefore is the first route of beforeRoutes that matches, by the
// rule Match applies: segments equal, or a :name taking any non-empty one.
func matchBefore(method, path string) (int, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, r := range beforeRoutes {
		pat := strings.Split(strings.Trim(r.path, "/"), "/")
		if r.method != method || len(pat) != len(segs) {
			continue
		}
		ok := true
		for j, p := range pat {
			if !(strings.HasPrefix(p, ":") && segs[j] != "") && p != segs[j] {
				ok = false
			}
		}
		if ok {
			return i, true
		}
	}
	return 0, false
}

// TestRoutesAsBefore: every path the hand-written table answered, the
// generated one answers with the same service, handler, auth mode and
// rate limit (routes added since answer only paths it did not). The
// paths are each route's pattern with its parameters filled by a plain
// value and by every literal segment any route has at that position (Bot,
// metadata, $export, ...), so that where two patterns overlap, the old
// order's winner must win.
func TestRoutesAsBefore(t *testing.T) {
	// The literals each segment position has in some route.
	literals := map[int]map[string]bool{}
	for _, r := range beforeRoutes {
		for i, seg := range strings.Split(strings.Trim(r.path, "/"), "/") {
			if literals[i] == nil {
				literals[i] = map[string]bool{"x": true}
			}
			if !strings.HasPrefix(seg, ":") {
				literals[i][seg] = true
			}
		}
	}
	checked := 0
	for _, r := range beforeRoutes {
		for _, path := range fill(strings.Split(strings.Trim(r.path, "/"), "/"), literals) {
			i, _ := matchBefore(r.method, path)
			want := beforeRoutes[i]
			if h, ok := moved[want.handler]; ok {
				want.handler = h
			}
			got, _, ok := Match(r.method, path)
			checked++
			if !ok || got.Service != want.service || got.Handler != want.handler || got.Auth() != want.auth || got.Has(SignInLimit) != want.limited {
				t.Errorf("%s %s: %s.%s %v %v (%s), was %s.%s %v %v (%s)", r.method, path,
					got.Service, got.Handler, got.Auth(), got.Has(SignInLimit), got.Path, want.service, want.handler, want.auth, want.limited, want.path)
			}
		}
	}
	t.Logf("%d paths answered as before", checked)
}

// fill is every path the pattern's segments give when each :name takes
// each of the values of its position.
func fill(pattern []string, values map[int]map[string]bool) []string {
	paths := []string{""}
	for i, seg := range pattern {
		var next []string
		for _, p := range paths {
			if !strings.HasPrefix(seg, ":") {
				next = append(next, p+"/"+seg)
				continue
			}
			for v := range values[i] {
				next = append(next, p+"/"+v)
			}
		}
		paths = next
	}
	return paths
}

// TestSubject: a route's subject is its service, method and segments,
// with a dot in a segment made "_", so NATS reads one token per segment.
func TestSubject(t *testing.T) {
	for _, c := range []struct{ service, route, want string }{
		{"membership", "POST /admin/projects/:projectId/invite", "pinion.membership.POST.admin.projects.:projectId.invite"},
		{"identity", "GET /.well-known/jwks.json", "pinion.identity.GET._well-known.jwks_json"},
		{"fhir", "POST /fhir/R4", "pinion.fhir.POST.fhir.R4"},
		{"botexec", "GET /fhir/R4/Bot/:id/$execute", "pinion.botexec.GET.fhir.R4.Bot.:id.$execute"},
	} {
		if got := Subject(c.service, c.route); got != c.want {
			t.Errorf("Subject(%s, %s) = %s, want %s", c.service, c.route, got, c.want)
		}
	}
	for _, r := range Routes {
		if r.Subject != Subject(r.Service, r.Pattern()) {
			t.Errorf("%s: subject %s, want %s", r.Pattern(), r.Subject, Subject(r.Service, r.Pattern()))
		}
	}
}

// TestTraitsAsBefore: the traits are on the routes the path rules they
// replaced picked (commit 562ae11), and on those given one since: the gateway named the applied
// revision on POST /oauth2/token and on every path ending in /$execute;
// the fhir service signed the answers of the routes its signedRoutes map
// listed, and unsigned the bodies of its writeRoutes.
func TestTraitsAsBefore(t *testing.T) {
	signedRoutes := map[string]bool{
		"POST /fhir/R4/$graphql": true,
		"GET /fhir/R4/:type/:id": true, "GET /fhir/R4/:type/:id/_history/:vid": true,
		"GET /fhir/R4/:type/:id/_history": true, "GET /fhir/R4/:type": true, "POST /fhir/R4/:type/_search": true,
		"POST /fhir/R4/:type": true, "PUT /fhir/R4/:type": true, "PUT /fhir/R4/:type/:id": true,
		"PATCH /fhir/R4/:type/:id": true,
		// Since: the export manifest's file urls (issue 55).
		"GET /fhir/R4/bulkdata/export/:id": true,
	}
	writeRoutes := map[string]bool{
		"POST /fhir/R4/:type": true, "PUT /fhir/R4/:type": true, "PUT /fhir/R4/:type/:id": true,
		"PATCH /fhir/R4/:type/:id": true,
	}
	for _, r := range Routes {
		named := r.Path == "/oauth2/token" || strings.HasSuffix(r.Path, "/$execute")
		fhir := r.Service == "fhir"
		for _, c := range []struct {
			trait AuthMode
			name  string
			want  bool
		}{
			{NamesApplied, "NamesApplied", named},
			{SignsURLs, "SignsURLs", fhir && signedRoutes[r.Pattern()]},
			{WritesResource, "WritesResource", fhir && writeRoutes[r.Pattern()]},
		} {
			if r.Has(c.trait) != c.want {
				t.Errorf("%s (%s): %s is %v, was %v", r.Pattern(), r.Service, c.name, r.Has(c.trait), c.want)
			}
		}
	}
}
