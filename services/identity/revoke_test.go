package identity

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// tokenEndpointCall posts a form to revocation or introspection with these
// headers and checks that the answer is never cached.
func tokenEndpointCall(t *testing.T, h bus.Handler, form url.Values, header map[string]string) *bus.Response {
	t.Helper()
	resp, err := h(context.Background(), formRequest(form, header))
	if err != nil {
		t.Fatalf("the endpoint failed: %v", err)
	}
	if resp.Header["Cache-Control"] != "no-store" {
		t.Fatalf("Cache-Control %q: %d %s", resp.Header["Cache-Control"], resp.Status, resp.Body)
	}
	return resp
}

// accessTokenOf is a client-credentials access token and its jti.
func accessTokenOf(t *testing.T, id, secret string) (tok, jti string) {
	t.Helper()
	body := decoded(t, clientToken(t, id, secret, "10.7.0.1", nil), nil, 200)
	tok = body["access_token"].(string)
	return tok, verify(t, tok, testBase).ID
}

func revoked(t *testing.T, jti string) bool {
	t.Helper()
	gone, err := live.conns.Sessions.TokenRevoked(context.Background(), jti)
	if err != nil {
		t.Fatal(err)
	}
	return gone
}

// RFC 7009: a client revokes its own tokens — an access token alone, a
// refresh token with its whole sign-in — and learns nothing else.
func TestRevocation(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "revocation")
	id, secret := newClient(t, project, nil)
	otherID, otherSecret := newClient(t, project, nil)
	post := url.Values{"client_id": {id}, "client_secret": {secret}}
	with := func(form url.Values, kv ...string) url.Values {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f
	}

	t.Run("an access token, by client_secret_post", func(t *testing.T) {
		tok, jti := accessTokenOf(t, id, secret)
		other, otherJTI := accessTokenOf(t, id, secret)
		resp := tokenEndpointCall(t, live.svc.oauth.Revoke, with(post, "token", tok, "token_type_hint", "access_token"), nil)
		decoded(t, resp, nil, 200)
		if bucket, rev, ok := resp.Session(); !ok || bucket != session.RevokedBucket || rev == 0 {
			t.Fatalf("the answer waits for %q %d %v", bucket, rev, ok)
		}
		if !revoked(t, jti) || revoked(t, otherJTI) {
			t.Fatalf("revoked: this token %v, the other %v", revoked(t, jti), revoked(t, otherJTI))
		}
		_ = other
	})
	t.Run("by HTTP Basic, each half form-encoded", func(t *testing.T) {
		// A secret with ':' and '%' reads right only when decoded (RFC 6749 §2.3.1).
		odd := "s3cret:with%25odd:chars+" + uuid.NewString()
		bid, _ := newClient(t, project, nil)
		if err := live.svc.clients.SetSecret(ctx, bid, odd); err != nil {
			t.Fatal(err)
		}
		tok, jti := accessTokenOf(t, bid, odd)
		auth := basic(url.QueryEscape(bid) + ":" + url.QueryEscape(odd))
		decoded(t, tokenEndpointCall(t, live.svc.oauth.Revoke, url.Values{"token": {tok}}, map[string]string{"Authorization": auth}), nil, 200)
		if !revoked(t, jti) {
			t.Fatal("not revoked")
		}
	})
	t.Run("another client's token is left alone", func(t *testing.T) {
		_, jti := accessTokenOf(t, otherID, otherSecret)
		tok, _ := accessTokenOf(t, otherID, otherSecret)
		resp := tokenEndpointCall(t, live.svc.oauth.Revoke, with(post, "token", tok), nil)
		decoded(t, resp, nil, 200)
		if _, _, ok := resp.Session(); ok || revoked(t, jti) {
			t.Fatal("another client's token was revoked")
		}
	})
	t.Run("a refresh token ends its sign-in", func(t *testing.T) {
		p := newPerson(t, "revoke-refresh")
		tokens := decoded(t, redeem(t, p.code(t, map[string]any{"scope": "openid offline_access"})), nil, 200)
		refresh := tokens["refresh_token"].(string)
		loginID := verify(t, refresh, testBase).LoginID
		// A public sign-in (no client): the token's holder may revoke it.
		resp := tokenEndpointCall(t, live.svc.oauth.Revoke, url.Values{"token": {refresh}, "token_type_hint": {"refresh_token"}}, nil)
		decoded(t, resp, nil, 200)
		if bucket, _, ok := resp.Session(); !ok || bucket != session.LoginsBucket {
			t.Fatalf("the answer waits for %q %v", bucket, ok)
		}
		if l, err := live.conns.Sessions.GetLogin(ctx, loginID); err != nil || !l.Revoked {
			t.Fatalf("login %+v %v", l, err)
		}
		testkit.TokenError(t, token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}, nil), 400, "invalid_grant", "Token revoked")
	})
	for _, c := range []struct {
		name  string
		token string
	}{
		{"unknown", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln"},
		{"not a token", "nothing"},
		{"oversize", strings.Repeat("a", 9000)},
	} {
		t.Run(c.name+" token", func(t *testing.T) {
			resp := tokenEndpointCall(t, live.svc.oauth.Revoke, with(post, "token", c.token), nil)
			decoded(t, resp, nil, 200)
		})
	}
	t.Run("refusals", func(t *testing.T) {
		tok, jti := accessTokenOf(t, id, secret)
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Revoke, with(post, "client_secret", secret+"x", "token", tok), nil),
			401, "invalid_client", "Invalid secret")
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Revoke, url.Values{"token": {tok}},
			map[string]string{"Authorization": basic(id + ":" + secret + "x")}), 401, "invalid_client", "Invalid secret")
		// A confidential client must prove itself, even to revoke.
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Revoke, url.Values{"client_id": {id}, "token": {tok}}, nil),
			401, "invalid_client", "Client authentication required")
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Revoke, post, nil), 400, "invalid_request", "Missing token")
		if revoked(t, jti) {
			t.Fatal("a refused request revoked the token")
		}
	})
}

// introspection asks about a token as the client with this id and secret.
func introspection(t *testing.T, id, secret, tok string) map[string]any {
	t.Helper()
	resp := tokenEndpointCall(t, live.svc.oauth.Introspect, url.Values{"token": {tok}},
		map[string]string{"Authorization": basic(url.QueryEscape(id) + ":" + url.QueryEscape(secret))})
	return decoded(t, resp, nil, 200)
}

// RFC 7662: an authenticated client learns whether a token of its own
// project counts, as the gateway would take it, and what it says.
func TestIntrospection(t *testing.T) {
	project := newProject(t, "introspection")
	id, secret := newClient(t, project, nil)
	tok, jti := accessTokenOf(t, id, secret)

	t.Run("a live access token", func(t *testing.T) {
		got := introspection(t, id, secret, tok)
		c := verify(t, tok, testBase)
		want := map[string]any{"active": true, "scope": "openid", "client_id": id, "username": id, "sub": id,
			"token_type": "Bearer", "iss": testBase, "aud": []any{testBase}, "jti": jti,
			"exp": float64(c.ExpiresAt.Unix()), "iat": float64(c.IssuedAt.Unix()), "nbf": float64(c.NotBefore.Unix())}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Fatalf("got  %s\nwant %s", gb, wb)
		}
	})
	t.Run("a live refresh token", func(t *testing.T) {
		p := newPerson(t, "introspect-refresh")
		pid, psecret := newClient(t, p.project, nil)
		tokens := decoded(t, redeem(t, p.code(t, map[string]any{"scope": "openid offline_access"})), nil, 200)
		got := introspection(t, pid, psecret, tokens["refresh_token"].(string))
		if got["active"] != true || got["token_type"] != "refresh_token" || got["sub"] != p.userID || got["scope"] != "openid offline_access" {
			t.Fatalf("%v", got)
		}
	})
	t.Run("another project's token", func(t *testing.T) {
		oid, osecret := newClient(t, newProject(t, "introspection elsewhere"), nil)
		otok, _ := accessTokenOf(t, oid, osecret)
		if got := introspection(t, id, secret, otok); len(got) != 1 || got["active"] != false {
			t.Fatalf("%v", got)
		}
		// The owner's own client sees it live.
		if got := introspection(t, oid, osecret, otok); got["active"] != true {
			t.Fatalf("%v", got)
		}
	})
	t.Run("a super admin client sees every project", func(t *testing.T) {
		sid, ssecret := newClient(t, clients.SuperAdminProjectID, nil)
		if got := introspection(t, sid, ssecret, tok); got["active"] != true {
			t.Fatalf("%v", got)
		}
	})
	for _, c := range []struct{ name, token string }{
		{"malformed", "nothing"},
		{"an ID token", decoded(t, clientToken(t, id, secret, "10.7.0.1", url.Values{"scope": {"openid"}}), nil, 200)["id_token"].(string)},
		{"a token of another issuer", "eyJhbGciOiJFUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJodHRwczovL2V2aWwuZXhhbXBsZS8ifQ.c2ln"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := introspection(t, id, secret, c.token); len(got) != 1 || got["active"] != false {
				t.Fatalf("%v", got)
			}
		})
	}
	t.Run("a revoked token", func(t *testing.T) {
		rtok, _ := accessTokenOf(t, id, secret)
		decoded(t, tokenEndpointCall(t, live.svc.oauth.Revoke, url.Values{"token": {rtok}, "client_id": {id}, "client_secret": {secret}}, nil), nil, 200)
		if got := introspection(t, id, secret, rtok); len(got) != 1 || got["active"] != false {
			t.Fatalf("%v", got)
		}
	})
	t.Run("an ended membership", func(t *testing.T) {
		p := newPerson(t, "introspect-ended")
		pid, psecret := newClient(t, p.project, nil)
		access := decoded(t, redeem(t, p.code(t, nil)), nil, 200)["access_token"].(string)
		if got := introspection(t, pid, psecret, access); got["active"] != true {
			t.Fatalf("before: %v", got)
		}
		setMembership(t, p.membership, func(m map[string]any) { m["active"] = false })
		if got := introspection(t, pid, psecret, access); len(got) != 1 || got["active"] != false {
			t.Fatalf("after: %v", got)
		}
	})
	t.Run("only for a client that authenticated", func(t *testing.T) {
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Introspect, url.Values{"token": {tok}}, nil),
			401, "invalid_client", "Client authentication required")
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Introspect, url.Values{"token": {tok}, "client_id": {"medplum-cli"}}, nil),
			401, "invalid_client", "Client authentication required")
		testkit.TokenError(t, tokenEndpointCall(t, live.svc.oauth.Introspect, url.Values{"token": {tok}, "client_id": {id}, "client_secret": {"wrong"}}, nil),
			401, "invalid_client", "Invalid secret")
	})
}

// Medplum's /auth/revoke: a person ends one of their own sign-ins, and
// only their own.
func TestAuthRevoke(t *testing.T) {
	ctx := context.Background()
	p, q := newPerson(t, "auth-revoke"), newPerson(t, "auth-revoke-other")
	code := p.code(t, nil)
	loginID, _, _ := strings.Cut(code, ".")
	call := func(who person, body any) (*bus.Response, error) {
		r := jsonRequest("", body)
		r.Principal = &bus.Principal{User: who.user}
		return live.svc.signins.AuthRevoke(ctx, r)
	}
	_, err := call(q, map[string]any{"loginId": loginID})
	expectOutcome(t, err, 404, "Not found", "")
	_, err = call(p, map[string]any{"loginId": uuid.NewString()})
	expectOutcome(t, err, 404, "Not found", "")
	_, err = call(p, map[string]any{"loginId": "x"})
	expectOutcome(t, err, 400, "Login ID is required.", "loginId")
	if l, err := live.conns.Sessions.GetLogin(ctx, loginID); err != nil || l.Revoked {
		t.Fatalf("login %+v %v", l, err)
	}
	resp, err := call(p, map[string]any{"loginId": loginID})
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	if bucket, _, ok := resp.Session(); !ok || bucket != session.LoginsBucket {
		t.Fatalf("the answer waits for %q %v", bucket, ok)
	}
	testkit.TokenError(t, redeem(t, code), 400, "invalid_grant", "Token revoked")
}
