package auth

import (
	"crypto/ecdsa"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify: the bearer-token parser never panics and accepts nothing but
// tokens signed by the key (a mutated valid token must be refused).
func FuzzVerify(f *testing.F) {
	k, _ := GenerateKey()
	s := &Signer{Key: k, Issuer: "http://localhost:8103/"}
	pub := &k.Private.PublicKey
	v := &Verifier{Issuer: s.Issuer, Audience: s.Issuer, Keys: func(kid string) *ecdsa.PublicKey {
		if kid == k.ID {
			return pub
		}
		return nil
	}}
	c := &Claims{LoginID: "l"}
	c.Audience = jwt.ClaimStrings{s.Issuer}
	valid, _ := s.Sign(c, time.Hour)
	f.Add(valid)
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		claims, err := v.Verify(tok)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if tok != valid || claims.LoginID != "l" {
			t.Fatalf("accepted a token that is not the signed one: %q", tok)
		}
	})
}
