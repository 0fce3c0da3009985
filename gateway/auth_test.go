package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/testenv"
)

const authTestBase = "http://localhost:8103/"

// bearerStack is a gateway on a real NATS server and session buckets, with
// a key set like identity's: the RSA key of ID tokens first, then the EC
// key of access tokens.
type bearerStack struct {
	url      string
	signer   *auth.Signer // ES256: access tokens
	idSigner *auth.Signer // RS256: ID tokens
	sessions *session.Store
	view     *session.View
	nc       *nats.Conn
}

func startBearerStack(t *testing.T) *bearerStack {
	t.Helper()
	ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	ctx := context.Background()
	c, err := infra.Open(ctx, infra.Options{NATSURL: "nats://in-process", InProcess: ns, Name: "bearer-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ec, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	rk, err := auth.GenerateRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := micro.AddService(c.NC, micro.Config{Name: "jwks", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	_ = svc.AddEndpoint("jwks", micro.HandlerFunc(func(r micro.Request) {
		b, _ := json.Marshal(map[string]any{"keys": []auth.JWK{rk.PublicJWK(), ec.PublicJWK()}})
		_ = r.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
	}), micro.WithEndpointSubject(bus.SubjectOf("GET", "/.well-known/jwks.json")))
	view, err := c.Sessions.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Close)
	g := New(Config{BaseURL: authTestBase, MaxBodyBytes: 4096, RequestTimeout: time.Second}, c.NC, view, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go g.Listen(gctx, ln)
	testenv.Eventually(t, "the gateway to load its keys", g.ready.Load)
	return &bearerStack{
		url:      "http://" + ln.Addr().String() + "/",
		signer:   &auth.Signer{Key: ec, Issuer: authTestBase},
		idSigner: &auth.Signer{RSA: rk, Issuer: authTestBase},
		sessions: c.Sessions, view: view, nc: c.NC,
	}
}

// login stores a live login of an active membership and returns its id.
func (s *bearerStack) login(t *testing.T, id string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := s.sessions.PutMembership(ctx, "m-"+id, session.Membership{Project: "p1", User: "User/" + id, Profile: "Practitioner/" + id, Active: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sessions.PutLogin(ctx, id, session.Login{Membership: "m-" + id, User: "User/" + id, Granted: true}); err != nil {
		t.Fatal(err)
	}
	return id
}

func (s *bearerStack) access(t *testing.T, loginID string, lifetime time.Duration) (string, *auth.Claims) {
	t.Helper()
	c := &auth.Claims{LoginID: loginID, Username: loginID, Profile: "Practitioner/" + loginID}
	c.Subject = loginID
	c.Audience = jwt.ClaimStrings{authTestBase}
	tok, err := s.signer.Sign(c, lifetime)
	if err != nil {
		t.Fatal(err)
	}
	return tok, c
}

// A request without credentials gets the bare challenge; a bearer token
// that is refused, for any reason, gets RFC 6750's invalid_token.
func TestBearerChallenge(t *testing.T) {
	s := startBearerStack(t)
	ctx := context.Background()
	bare := `Bearer realm="` + authTestBase + `"`
	invalid := `Bearer realm="` + authTestBase + `", error="invalid_token"`

	good, _ := s.access(t, s.login(t, "u-good"), time.Hour)
	other := mustKey(t)
	other.ID = s.signer.Key.ID // the right kid, another key
	forged, _ := (&auth.Signer{Key: other, Issuer: authTestBase}).Sign(&auth.Claims{LoginID: "u-good", Username: "u-good",
		RegisteredClaims: jwt.RegisteredClaims{Audience: jwt.ClaimStrings{authTestBase}}}, time.Hour)
	expired, _ := s.access(t, s.login(t, "u-expired"), -time.Minute)
	revoked, rc := s.access(t, s.login(t, "u-revoked"), time.Hour)
	rev, err := s.sessions.RevokeToken(ctx, rc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.view.WaitApplied(ctx, session.RevokedBucket, rev); err != nil {
		t.Fatal(err)
	}
	ended, _ := s.access(t, s.login(t, "u-ended"), time.Hour)
	if _, rev, err = s.sessions.UpdateLoginRev(ctx, "u-ended", func(l *session.Login) error { l.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.view.WaitApplied(ctx, session.LoginsBucket, rev); err != nil {
		t.Fatal(err)
	}
	idc := &auth.Claims{LoginID: "u-good", FHIRUser: "Practitioner/u-good"}
	idc.Audience = jwt.ClaimStrings{authTestBase}
	idTokenRS, _ := s.idSigner.Sign(idc, time.Hour)
	idc2 := &auth.Claims{LoginID: "u-good", Username: "u-good", FHIRUser: "Practitioner/u-good"}
	idc2.Audience = jwt.ClaimStrings{authTestBase}
	idTokenES, _ := s.signer.Sign(idc2, time.Hour)

	cases := []struct {
		name          string
		authorization string
		status        int
		challenge     string
	}{
		{"no credentials", "", 401, bare},
		{"another scheme", "Token abc", 401, bare},
		{"a valid access token", "Bearer " + good, 503, ""}, // through to a service that is not running
		{"bad signature", "Bearer " + forged, 401, invalid},
		{"not a JWT", "Bearer abc.def.ghi", 401, invalid},
		{"expired", "Bearer " + expired, 401, invalid},
		{"revoked", "Bearer " + revoked, 401, invalid},
		{"ended login", "Bearer " + ended, 401, invalid},
		{"an RS256 ID token", "Bearer " + idTokenRS, 401, invalid},
		{"an ES256 ID token", "Bearer " + idTokenES, 401, invalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.authorization != "" {
				h["Authorization"] = tc.authorization
			}
			st, body, hdr := send(t, "GET", s.url+"fhir/R4/Patient", nil, h)
			if st != tc.status {
				t.Fatalf("status %d, want %d (%v)", st, tc.status, body)
			}
			if got := hdr.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if body["resourceType"] != "OperationOutcome" {
				t.Errorf("not an OperationOutcome: %v", body)
			}
		})
	}
}

func mustKey(t *testing.T) *auth.Key {
	t.Helper()
	k, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
