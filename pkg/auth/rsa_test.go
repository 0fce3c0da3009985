package auth

import (
	"crypto/rsa"
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ID tokens are signed RS256 with the RSA key; a verifier takes them only
// when it is given RSA keys, and then only with the RSA key their kid names.
func TestRSASigner(t *testing.T) {
	ec, v := setup(t)
	rk, err := GenerateRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	pemText, err := rk.MarshalPrivate()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRSAPrivate(rk.ID, pemText)
	if err != nil || !back.Private.Equal(rk.Private) {
		t.Fatalf("stored key read back: %v", err)
	}
	if _, err := ParseRSAPrivate("k", mustPEM(t, ec.Key)); err == nil {
		t.Error("an EC key was read as an RSA key")
	}
	idSigner := &Signer{RSA: rk, Issuer: ec.Issuer}
	c := &Claims{LoginID: "l1", FHIRUser: "Practitioner/p1"}
	c.Subject = "u1"
	c.Audience = jwt.ClaimStrings{ec.Issuer}
	tok, err := idSigner.Sign(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, &Claims{})
	if err != nil || parsed.Method != jwt.SigningMethodRS256 || parsed.Header["kid"] != rk.ID {
		t.Fatalf("header %v, %v", parsed.Header, err)
	}
	if _, err := v.Verify(tok); err == nil {
		t.Error("an ES256-only verifier took an RS256 token")
	}
	jwk := rk.PublicJWK()
	raw, _ := json.Marshal(jwk)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if m["kty"] != "RSA" || m["alg"] != "RS256" || m["use"] != "sig" || m["n"] == "" || m["e"] != "AQAB" || m["crv"] != nil || m["x"] != nil {
		t.Errorf("RSA JWK %s", raw)
	}
	pub, err := jwk.RSAPublicKey()
	if err != nil || !pub.Equal(&rk.Private.PublicKey) {
		t.Fatalf("published key: %v", err)
	}
	if _, err := jwk.PublicKey(); err == nil {
		t.Error("an RSA JWK decoded as an EC key")
	}
	v.RSAKeys = func(kid string) *rsa.PublicKey {
		if kid == rk.ID {
			return pub
		}
		return nil
	}
	if got, err := v.Verify(tok); err != nil || got.FHIRUser != "Practitioner/p1" {
		t.Fatalf("RS256 ID token refused: %v", err)
	}
	// The EC key's kid on an RS256 token finds no RSA key.
	other, _ := GenerateRSAKey()
	other.ID = ec.Key.ID
	forged, _ := (&Signer{RSA: other, Issuer: ec.Issuer}).Sign(c, time.Hour)
	if _, err := v.Verify(forged); err == nil {
		t.Error("an RS256 token under the EC key's kid was taken")
	}
	// Access tokens are still ES256 and still verify.
	at, _ := ec.Sign(&Claims{LoginID: "l1", Username: "u1", RegisteredClaims: jwt.RegisteredClaims{Audience: jwt.ClaimStrings{ec.Issuer}}}, time.Hour)
	if _, err := v.Verify(at); err != nil {
		t.Errorf("ES256 token refused beside RSA keys: %v", err)
	}
}

func mustPEM(t *testing.T, k *Key) string {
	t.Helper()
	p, err := k.MarshalPrivate()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
