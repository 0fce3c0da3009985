package identity

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

func expectOutcome(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	testkit.Outcome(t, err, status, text, expr)
}

// $rotate-secret's refusals before the client is read: who may ask, and
// that exactly one secret names what to rotate (Medplum's texts).
func TestRotateOperationRefusals(t *testing.T) {
	s := unwired(t)
	admin := &bus.Principal{User: "User/u1", Project: "p1", Admin: true}
	cases := []struct {
		name      string
		principal *bus.Principal
		body      string
		status    int
		text      string
	}{
		{"anonymous", nil, `{"secret":"a"}`, 401, "Unauthorized"},
		{"not an admin", &bus.Principal{User: "User/u2", Project: "p1"}, `{"secret":"a"}`, 403, "Only project administrators can change ClientApplication resources"},
		{"no secret", admin, `{}`, 400, "Secret to rotate must be provided"},
		{"empty secrets", &bus.Principal{SuperAdmin: true}, `{"secret":"","retiringSecret":""}`, 400, "Secret to rotate must be provided"},
		{"both", admin, `{"secret":"a","retiringSecret":"b"}`, 400, "Only one secret can be rotated at a time"},
		{"unknown parameter", admin, `{"clientSecret":"a"}`, 400, "Unknown parameter: clientSecret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.clients.RotateOperation(context.Background(), &bus.Request{
				Method: "POST", Params: map[string]string{"id": "c1"}, Principal: tc.principal,
				Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(tc.body),
			})
			if fe := fhir.AsError(err); err == nil || fe.Status != tc.status || fe.Message() != tc.text {
				t.Fatalf("%v, want %d %q", err, tc.status, tc.text)
			}
		})
	}
}

// admin is a project admin's principal.
func admin(project string) *bus.Principal {
	return &bus.Principal{User: "User/admin-of-" + project, Profile: "Practitioner/admin", Project: project, Admin: true}
}

// newClient creates a client in the project through the admin route and
// returns its id and secret.
func newClient(t *testing.T, project string, fields map[string]any) (id, secret string) {
	t.Helper()
	if fields == nil {
		fields = map[string]any{}
	}
	if _, ok := fields["name"]; !ok {
		fields["name"] = "Backend"
	}
	r := jsonRequest("", fields)
	r.Params, r.Principal = map[string]string{"projectId": project}, admin(project)
	resp, err := live.svc.clients.Create(context.Background(), r)
	body := decoded(t, resp, err, 201)
	id, _ = body["id"].(string)
	secret, _ = body["secret"].(string)
	if id == "" || len(secret) < auth.MinSecretLength {
		t.Fatalf("created %v", body)
	}
	return id, secret
}

// clientToken asks for a client-credentials token with HTTP Basic from remote.
func clientToken(t *testing.T, id, secret, remote string, form url.Values) *bus.Response {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("grant_type", "client_credentials")
	r := formRequest(form, map[string]string{"Authorization": basic(url.QueryEscape(id) + ":" + url.QueryEscape(secret))})
	r.Remote = remote
	resp, err := live.svc.oauth.Token(context.Background(), r)
	if err != nil {
		t.Fatalf("the token endpoint failed: %v", err)
	}
	return resp
}

// expectSecret checks whether a client's secret gets a token.
func expectSecret(t *testing.T, id, secret string, works bool) {
	t.Helper()
	resp := clientToken(t, id, secret, "", nil)
	if works && resp.Status != 200 {
		t.Fatalf("the secret does not work: %d %s", resp.Status, resp.Body)
	}
	if !works {
		testkit.TokenError(t, resp, 401, "invalid_client", "Invalid secret")
	}
}

// A project admin creates a client: the answer shows its secret once, the
// client has a membership of its own, and its secret works at once.
func TestCreateClient(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Clients")
	id, secret := newClient(t, project, map[string]any{"name": "Backend", "redirectUris": []any{"https://app.example/cb"}})
	res, err := live.conns.Repo.Read(ctx, repo.Scope{Project: project}, "ClientApplication", id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.JSON), secret) {
		t.Fatal("the stored client holds its secret")
	}
	if cred, err := live.svc.clients.Credentials(ctx, id); err != nil || cred.Digest != auth.SecretDigest(secret) || cred.Retiring != "" {
		t.Fatalf("credentials %+v %v", cred, err)
	}
	expectSecret(t, id, secret, true)

	cases := []struct {
		name      string
		principal *bus.Principal
		body      string
		status    int
		text      string
	}{
		{"not an admin", &bus.Principal{User: "User/u1", Project: project}, `{"name":"x"}`, 403, "Only project administrators can change ClientApplication resources"},
		{"another project's admin", admin("elsewhere"), `{"name":"x"}`, 403, "Forbidden"},
		{"a bad redirect", admin(project), `{"name":"x","redirectUri":"/cb"}`, 400, "Invalid redirect URI: want an absolute URI without a fragment"},
		{"a secret of its own", admin(project), `{"name":"x","secret":"mine"}`, 400, "ClientApplication.secret is set by the server"},
		{"no name", admin(project), `{"description":"x"}`, 400, "Client name is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Method: "POST", Params: map[string]string{"projectId": project}, Principal: tc.principal,
				Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(tc.body)}
			_, err := live.svc.clients.Create(ctx, r)
			if fe := fhir.AsError(err); err == nil || fe.Status != tc.status || fe.Message() != tc.text {
				t.Fatalf("%v, want %d %q", err, tc.status, tc.text)
			}
		})
	}
}

// The credentials of a client that was not created are removed.
func TestDropClientSecret(t *testing.T) {
	ctx := context.Background()
	id := uuid.NewString()
	if err := live.svc.clients.SetSecret(ctx, id, "a secret"); err != nil {
		t.Fatal(err)
	}
	if cred, err := live.svc.clients.Credentials(ctx, id); err != nil || cred == nil {
		t.Fatalf("%v %v", cred, err)
	}
	live.svc.clients.DropSecret(ctx, id)
	if cred, err := live.svc.clients.Credentials(ctx, id); err != nil || cred != nil {
		t.Fatalf("left behind: %+v %v", cred, err)
	}
}

// An admin's rotation gives a new secret; the old one works for the grace
// period, and a client has at most two working secrets.
func TestRotateSecret(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Rotation")
	id, first := newClient(t, project, nil)
	rotate := func(p *bus.Principal, client string) (string, error) {
		resp, err := live.svc.clients.RotateSecret(ctx, &bus.Request{Method: "POST", Principal: p,
			Params: map[string]string{"projectId": project, "clientId": client}})
		if err != nil {
			return "", err
		}
		body := decoded(t, resp, nil, 200)
		if body["id"] != client || resp.Header["Content-Type"] != bus.FHIRContentType {
			t.Fatalf("answer %v %v", body, resp.Header)
		}
		return body["secret"].(string), nil
	}
	second, err := rotate(admin(project), id)
	if err != nil {
		t.Fatal(err)
	}
	expectSecret(t, id, second, true)
	expectSecret(t, id, first, true)
	third, err := rotate(admin(project), id)
	if err != nil {
		t.Fatal(err)
	}
	expectSecret(t, id, third, true)
	expectSecret(t, id, second, true)
	expectSecret(t, id, first, false)

	if _, err := rotate(admin("elsewhere"), id); fhir.AsError(err).Status != 403 {
		t.Fatalf("another project's admin: %v", err)
	}
	if _, err := rotate(admin(project), uuid.NewString()); fhir.AsError(err).Status != 404 {
		t.Fatalf("no such client: %v", err)
	}
}

// Medplum's $rotate-secret: knowing the current secret replaces it,
// knowing the retiring one ends it at once; any other secret is refused.
func TestRotateOperation(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Operation")
	id, first := newClient(t, project, nil)
	op := func(p *bus.Principal, client string, in map[string]any) (map[string]any, error) {
		r := jsonRequest("", in)
		r.Principal, r.Params = p, map[string]string{"id": client}
		resp, err := live.svc.clients.RotateOperation(ctx, r)
		if err != nil {
			return nil, err
		}
		return decoded(t, resp, nil, 200), nil
	}
	mismatch := func(in map[string]any) {
		t.Helper()
		_, err := op(admin(project), id, in)
		expectOutcome(t, err, 400, "Provided secret does not match client", "")
	}
	mismatch(map[string]any{"secret": "a guess"})
	mismatch(map[string]any{"retiringSecret": first}) // nothing retires yet

	body, err := op(admin(project), id, map[string]any{"resourceType": "Parameters", "parameter": []any{map[string]any{"name": "secret", "valueString": first}}})
	if err != nil {
		t.Fatal(err)
	}
	second, _ := body["secret"].(string)
	if second == "" || second == first {
		t.Fatalf("answer %v", body)
	}
	expectSecret(t, id, first, true)
	mismatch(map[string]any{"secret": first}) // no longer current

	body, err = op(admin(project), id, map[string]any{"retiringSecret": first})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := body["secret"]; ok || body["id"] != id {
		t.Fatalf("a retirement shows a secret: %v", body)
	}
	expectSecret(t, id, first, false)
	expectSecret(t, id, second, true)

	// A super admin reaches any project's client; an admin only its own.
	if _, err := op(&bus.Principal{User: "User/root", SuperAdmin: true}, id, map[string]any{"secret": second}); err != nil {
		t.Fatal(err)
	}
	_, err = op(admin("elsewhere"), id, map[string]any{"secret": "x"})
	expectOutcome(t, err, 404, "Not found", "")
}
