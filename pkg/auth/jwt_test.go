package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func setup(t *testing.T) (*Signer, *Verifier) {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &Signer{Key: k, Issuer: "http://localhost:8103/"}
	pub, err := k.PublicJWK().PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Issuer: s.Issuer, Audience: s.Issuer, Keys: func(kid string) *ecdsa.PublicKey {
		if kid == k.ID {
			return pub
		}
		return nil
	}}
	return s, v
}

func TestVerifyRejectsForgeries(t *testing.T) {
	s, v := setup(t)
	good := func() *Claims {
		c := &Claims{LoginID: "l1", Username: "u1", Profile: "Practitioner/p1"}
		c.Subject = "u1"
		c.Audience = jwt.ClaimStrings{s.Issuer}
		return c
	}
	valid, err := s.Sign(good(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := v.Verify(valid); err != nil || c.LoginID != "l1" {
		t.Fatalf("valid token refused: %v", err)
	}
	pubDER, _ := x509.MarshalPKIXPublicKey(&s.Key.Private.PublicKey)

	other, _ := GenerateKey()
	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		payload = []byte(strings.Replace(string(payload), `"l1"`, `"l2"`, 1))
		parts[1] = base64.RawURLEncoding.EncodeToString(payload)
		return strings.Join(parts, ".")
	}
	cases := []struct {
		name  string
		token func() string
	}{
		{"alg none", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodNone, good())
			tok.Header["kid"] = s.Key.ID
			str, _ := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
			return str
		}},
		{"HS256 keyed with the public key", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, good())
			tok.Header["kid"] = s.Key.ID
			str, _ := tok.SignedString(pubDER)
			return str
		}},
		{"unknown kid", func() string {
			str, _ := (&Signer{Key: other, Issuer: s.Issuer}).Sign(good(), time.Hour)
			return str
		}},
		{"right kid, other key", func() string {
			str, _ := (&Signer{Key: &Key{ID: s.Key.ID, Private: other.Private}, Issuer: s.Issuer}).Sign(good(), time.Hour)
			return str
		}},
		{"missing kid", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodES256, good())
			str, _ := tok.SignedString(s.Key.Private)
			return str
		}},
		{"expired", func() string {
			str, _ := s.Sign(good(), -time.Minute)
			return str
		}},
		{"wrong issuer", func() string {
			str, _ := (&Signer{Key: s.Key, Issuer: "http://evil/"}).Sign(good(), time.Hour)
			return str
		}},
		{"wrong audience", func() string {
			c := good()
			c.Audience = jwt.ClaimStrings{"http://evil/"}
			str, _ := s.Sign(c, time.Hour)
			return str
		}},
		{"tampered payload", func() string { return tamper(valid) }},
		{"garbage", func() string { return "not.a.jwt" }},
		{"empty", func() string { return "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := v.Verify(tc.token()); !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("accepted or wrong error: %v", err)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	s := NewSecret()
	if len(s) != 64 {
		t.Fatalf("secret length %d", len(s))
	}
	d := SecretDigest(s)
	if !SecretMatches(d, s) || SecretMatches(d, s+"x") || SecretMatches("", s) || SecretMatches("zz", s) {
		t.Fatal("digest comparison wrong")
	}
	h, err := HashPassword(context.Background(), "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := CheckPassword(context.Background(), h, "correct horse"); !ok || err != nil {
		t.Fatalf("password refused: %v", err)
	}
	if ok, _ := CheckPassword(context.Background(), h, "wrong horse"); ok {
		t.Fatal("wrong password accepted")
	}
}

func TestKeyRoundTrip(t *testing.T) {
	k, _ := GenerateKey()
	p, err := k.MarshalPrivate()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParsePrivate(k.ID, p)
	if err != nil || !k2.Private.Equal(k.Private) {
		t.Fatalf("round trip: %v", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	var t testing.T
	s, v := setup(&t)
	c := &Claims{LoginID: "l"}
	c.Audience = jwt.ClaimStrings{s.Issuer}
	tok, _ := s.Sign(c, time.Hour)
	for b.Loop() {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}
