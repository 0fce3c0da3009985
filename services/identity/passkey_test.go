package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncbor"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/factors"
)

// testOrigin is the origin a browser of testBase answers from.
const testOrigin = "https://pinion.example"

var b64 = base64.RawURLEncoding

// softKey is a software authenticator holding one passkey (ES256, "none"
// attestation), as a browser's platform authenticator would answer; its
// counter grows with each signature.
type softKey struct {
	priv   *ecdsa.PrivateKey
	id     []byte
	handle []byte // the user handle it was created for
	count  uint32
}

func newSoftKey(t *testing.T) *softKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &softKey{priv: priv, id: id}
}

func clientDataJSON(typ, challenge, origin string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": challenge, "origin": origin, "crossOrigin": false})
	return b
}

// authData is the authenticator data for rpID: user present and verified,
// with the attested credential when attested is set.
func (k *softKey) authData(rpID string, attested bool) []byte {
	rp := sha256.Sum256([]byte(rpID))
	flags := byte(0x01 | 0x04) // UP, UV
	if attested {
		flags |= 0x40
	}
	out := append(rp[:], flags)
	out = binary.BigEndian.AppendUint32(out, k.count)
	if attested {
		out = append(out, make([]byte, 16)...) // AAGUID
		out = binary.BigEndian.AppendUint16(out, uint16(len(k.id)))
		out = append(out, k.id...)
		x, y := k.priv.X.FillBytes(make([]byte, 32)), k.priv.Y.FillBytes(make([]byte, 32))
		cose, _ := webauthncbor.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: x, -3: y})
		out = append(out, cose...)
	}
	return out
}

// create answers a registration's options from origin.
func (k *softKey) create(t *testing.T, options []byte, origin string) []byte {
	t.Helper()
	var cc protocol.CredentialCreation
	if err := json.Unmarshal(options, &cc); err != nil {
		t.Fatalf("%v: %s", err, options)
	}
	handle, err := b64.DecodeString(cc.Response.User.ID.(string))
	if err != nil {
		t.Fatal(err)
	}
	k.handle = handle
	att, _ := webauthncbor.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": k.authData(cc.Response.RelyingParty.ID, true)})
	out, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON":    b64.EncodeToString(clientDataJSON("webauthn.create", cc.Response.Challenge.String(), origin)),
			"attestationObject": b64.EncodeToString(att),
		}})
	return out
}

// get answers a sign-in's options from origin.
func (k *softKey) get(t *testing.T, options []byte, origin string) []byte {
	t.Helper()
	var ca protocol.CredentialAssertion
	if err := json.Unmarshal(options, &ca); err != nil {
		t.Fatalf("%v: %s", err, options)
	}
	k.count++
	ad := k.authData(ca.Response.RelyingPartyID, false)
	cd := clientDataJSON("webauthn.get", ca.Response.Challenge.String(), origin)
	h := sha256.Sum256(cd)
	d := sha256.Sum256(append(append([]byte{}, ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, k.priv, d[:])
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON": b64.EncodeToString(cd), "authenticatorData": b64.EncodeToString(ad),
			"signature": b64.EncodeToString(sig), "userHandle": b64.EncodeToString(k.handle),
		}})
	return out
}

// registerPasskey registers k for p through the JSON API.
func registerPasskey(t *testing.T, p person, k *softKey, name string) map[string]any {
	t.Helper()
	ctx := context.Background()
	resp, err := live.svc.factors.RegisterBegin(ctx, signedInRequest(p.principal(), "10.40.0.1", nil))
	decoded(t, resp, err, 200)
	resp, err = live.svc.factors.RegisterFinish(ctx, signedInRequest(p.principal(), "10.40.0.1",
		map[string]any{"name": name, "credential": json.RawMessage(k.create(t, resp.Body, testOrigin))}))
	return decoded(t, resp, err, 201)
}

// The JSON API: register, list, rename, remove; an answer is taken once,
// from Pinion's origin only.
func TestPasskeyAPI(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "passkeyapi")
	signed := func(body any) *bus.Request { return signedInRequest(p.principal(), "10.40.0.2", body) }
	k := newSoftKey(t)
	added := registerPasskey(t, p, k, "Laptop")
	if added["id"] != b64.EncodeToString(k.id) || added["name"] != "Laptop" {
		t.Fatalf("added %v", added)
	}
	if string(k.handle) != p.userID {
		t.Fatalf("user handle %q, want the user id", k.handle)
	}

	// The challenge was taken: the same answer again is refused.
	resp, err := live.svc.factors.RegisterBegin(ctx, signed(nil))
	decoded(t, resp, err, 200)
	k2 := newSoftKey(t)
	answer := k2.create(t, resp.Body, testOrigin)
	resp, err = live.svc.factors.RegisterFinish(ctx, signed(map[string]any{"name": "Phone", "credential": json.RawMessage(answer)}))
	decoded(t, resp, err, 201)
	_, err = live.svc.factors.RegisterFinish(ctx, signed(map[string]any{"name": "Phone", "credential": json.RawMessage(answer)}))
	refusedWith(t, err, 400, factors.NoCeremonyText)

	// An answer made on another site is refused, and spends the challenge.
	resp, err = live.svc.factors.RegisterBegin(ctx, signed(nil))
	decoded(t, resp, err, 200)
	evil := newSoftKey(t).create(t, resp.Body, "https://evil.example")
	_, err = live.svc.factors.RegisterFinish(ctx, signed(map[string]any{"name": "Evil", "credential": json.RawMessage(evil)}))
	if fe := fhir.AsError(err); err == nil || fe.Status != 400 || !strings.HasPrefix(fe.Message(), factors.PasskeyRefusedText) {
		t.Fatalf("another origin: %v", err)
	}

	// A missing or long name is refused beside the field.
	_, err = live.svc.factors.Rename(ctx, signed(map[string]any{"name": strings.Repeat("x", 65)}))
	refusedWith(t, err, 400, "A passkey's name is at most 64 characters")

	rename := signed(map[string]any{"name": "Work laptop"})
	rename.Method, rename.Params = "PATCH", map[string]string{"id": added["id"].(string)}
	resp, err = live.svc.factors.Rename(ctx, rename)
	decoded(t, resp, err, 200)
	resp, err = live.svc.factors.Passkeys(ctx, signed(nil))
	list := decoded(t, resp, err, 200)["passkeys"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["name"] != "Work laptop" {
		t.Fatalf("list %v", list)
	}
	if strings.Contains(string(resp.Body), "publicKey") {
		t.Fatalf("the list shows the key: %s", resp.Body)
	}
	del := signed(nil)
	del.Method, del.Params = "DELETE", map[string]string{"id": b64.EncodeToString(k2.id)}
	resp, err = live.svc.factors.Remove(ctx, del)
	decoded(t, resp, err, 200)
	_, err = live.svc.factors.Remove(ctx, del)
	if fe := fhir.AsError(err); err == nil || fe.Status != 404 {
		t.Fatalf("removed twice: %v", err)
	}
	if n, _ := live.svc.factors.PasskeyCount(ctx, p.userID); n != 1 {
		t.Fatalf("%d passkeys, want 1", n)
	}
}

// Someone whose project requires MFA keeps one second factor: the last
// passkey cannot go while no authenticator is enrolled.
func TestPasskeyLastFactor(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "passkeylast")
	requireMFA(t, p.project)
	k1, k2 := newSoftKey(t), newSoftKey(t)
	registerPasskey(t, p, k1, "One")
	registerPasskey(t, p, k2, "Two")
	remove := func(k *softKey) error {
		r := signedInRequest(p.principal(), "10.40.0.3", nil)
		r.Method, r.Params = "DELETE", map[string]string{"id": b64.EncodeToString(k.id)}
		_, err := live.svc.factors.Remove(ctx, r)
		return err
	}
	if err := remove(k1); err != nil {
		t.Fatal(err)
	}
	refusedWith(t, remove(k2), 400, factors.LastFactorText)
	if n, _ := live.svc.factors.PasskeyCount(ctx, p.userID); n != 1 {
		t.Fatalf("%d passkeys, want 1", n)
	}
}

var passkeyOptions = regexp.MustCompile(`data-options="([^"]+)"`)

// optionsOf is the WebAuthn options a passkey page carries for its script.
func optionsOf(t *testing.T, page *bus.Response) []byte {
	t.Helper()
	m := passkeyOptions.FindSubmatch(page.Body)
	if m == nil {
		t.Fatalf("no passkey options:\n%s", page.Body)
	}
	if !strings.Contains(page.Header["Content-Security-Policy"], "script-src 'sha256-") {
		t.Fatalf("the script is not allowed: %v", page.Header)
	}
	return []byte(html.UnescapeString(string(m[1])))
}

// On /oauth2/authorize's page, a passkey signs in with no password; an
// unknown passkey, or an answer given twice, is refused beside the
// button.
func TestPasskeySignInPage(t *testing.T) {
	p := newPerson(t, "passkeypage")
	k := newSoftKey(t)
	registerPasskey(t, p, k, "Laptop")
	app := newWebApp(t, p.project)
	signin := app.get(t, nil)
	expectPage(t, signin, 200, "Sign in with a passkey")

	// A passkey never registered here, offered for this person, is unknown.
	step := pagePost(t, signin, "10.40.1.1", "passkey", "begin")
	expectPage(t, step, 200, "Use your passkey")
	stranger := newSoftKey(t)
	stranger.handle = []byte(p.userID)
	page := pagePost(t, step, "10.40.1.1", "passkey", "finish", "credential", string(stranger.get(t, optionsOf(t, step), testOrigin)))
	expectPage(t, page, 400, factors.UnknownPasskeyText)

	// The person's passkey signs in; the same answer again is refused.
	answer := k.get(t, optionsOf(t, page), testOrigin)
	done := pagePost(t, page, "10.40.1.1", "passkey", "finish", "credential", string(answer))
	if q := returned(t, app.allow(t, done, "10.40.1.1")); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
	again := pagePost(t, page, "10.40.1.1", "passkey", "finish", "credential", string(answer))
	expectPage(t, again, 400, html.EscapeString(factors.NoCeremonyText))
}

// After a password, a passkey is the second factor a project requires of
// someone with no authenticator.
func TestPasskeySecondFactor(t *testing.T) {
	p := newPerson(t, "passkeyfactor")
	requireMFA(t, p.project)
	k := newSoftKey(t)
	registerPasskey(t, p, k, "Laptop")
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	step := app.post(t, header, "10.40.2.1", "csrf", csrf, "email", p.email, "password", p.password)
	expectPage(t, step, 200, "Use your passkey")
	// A code is no way past it.
	expectPage(t, pagePost(t, step, "10.40.2.1", "mfa_code", "123456"), 200, "Use your passkey")
	step = pagePost(t, step, "10.40.2.1", "passkey", "begin")
	done := pagePost(t, step, "10.40.2.1", "passkey", "finish", "credential", string(k.get(t, optionsOf(t, step), testOrigin)))
	if q := returned(t, app.allow(t, done, "10.40.2.1")); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
}

// A project's admin sees each member's factors (counted, never shown) and
// a reset drops the passkeys with the authenticator; others are refused.
func TestMFAOverviewAndReset(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "passkeyoverview")
	registerPasskey(t, p, newSoftKey(t), "Laptop")
	registerPasskey(t, p, newSoftKey(t), "Phone")
	overview := func(pr *bus.Principal) (*bus.Response, error) {
		return live.svc.factors.Overview(ctx, &bus.Request{Method: "GET", Principal: pr,
			Params: map[string]string{"projectId": p.project}, Query: map[string][]string{"membership": {p.membership + ",unknown"}}})
	}
	if _, err := overview(p.principal()); fhir.AsError(err).Status != 403 {
		t.Fatalf("a member's overview: %v", err)
	}
	admin := &bus.Principal{User: "User/admin", Profile: "Practitioner/admin", Project: p.project, Admin: true}
	resp, err := overview(admin)
	members := decoded(t, resp, err, 200)["members"].([]any)
	if len(members) != 1 || members[0].(map[string]any)["passkeys"] != 2.0 || members[0].(map[string]any)["enrolled"] != false {
		t.Fatalf("overview %v", members)
	}
	path := map[string]string{"projectId": p.project, "membershipId": p.membership}
	resp, err = live.svc.factors.Reset(ctx, &bus.Request{Method: "POST", Params: path, Principal: admin})
	decoded(t, resp, err, 200)
	if n, _ := live.svc.factors.PasskeyCount(ctx, p.userID); n != 0 {
		t.Fatalf("%d passkeys after the reset", n)
	}
}

// An enrolled person's code page offers their passkey instead of a code.
func TestPasskeyInsteadOfCode(t *testing.T) {
	now := pinClock(t)
	p := newPerson(t, "passkeyinstead")
	p.enroll(t, now)
	k := newSoftKey(t)
	registerPasskey(t, p, k, "Laptop")
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	page := app.post(t, header, "10.40.3.1", "csrf", csrf, "email", p.email, "password", p.password)
	expectPage(t, page, 200, "Use a passkey instead")
	step := pagePost(t, page, "10.40.3.1", "passkey", "begin")
	expectPage(t, step, 200, "Use your passkey")
	done := pagePost(t, step, "10.40.3.1", "passkey", "finish", "credential", string(k.get(t, optionsOf(t, step), testOrigin)))
	if q := returned(t, app.allow(t, done, "10.40.3.1")); q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
}

// Browsers refuse an IP address as a passkey's relying party: a base URL
// on one makes the passkey routes a 400 that names the setting to change,
// not a 500.
func TestPasskeyOnAnIPAddress(t *testing.T) {
	p := newPerson(t, "passkeyip")
	s := live.svc
	f := factors.New(factors.Config{BaseURL: "http://127.0.0.1:8103/"}, s.repo, s.secrets, s.sessions, s.accounts, s.limiter, s.rec, quiet)
	_, err := f.RegisterBegin(context.Background(), signedInRequest(p.principal(), "10.40.9.1", nil))
	if fe := fhir.AsError(err); err == nil || fe.Status != 400 || !strings.Contains(fe.Message(), "PINION_BASE_URL") {
		t.Fatalf("%v, want a 400 naming PINION_BASE_URL", err)
	}
}
