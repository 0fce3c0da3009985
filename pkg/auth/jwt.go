// Package auth issues and verifies Pinion's tokens (access and refresh
// tokens ES256, ID tokens RS256) and hashes the secrets people and
// programs sign in with.
package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Claims are the claims of a Pinion access token, named as Medplum names them.
type Claims struct {
	jwt.RegisteredClaims
	LoginID  string `json:"login_id,omitempty"`
	Username string `json:"username,omitempty"`
	Profile  string `json:"profile,omitempty"`
	Scope    string `json:"scope,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	// Refresh tokens carry the secret that rotates on each use.
	RefreshSecret string `json:"refresh_secret,omitempty"`
	// ID tokens name the profile as fhirUser.
	FHIRUser string `json:"fhirUser,omitempty"`
	Nonce    string `json:"nonce,omitempty"`
	// AuthTime is when the person typed their password (ID tokens; OIDC
	// Core §2: required with max_age or prompt=login, given always).
	AuthTime int64 `json:"auth_time,omitempty"`
	// WebSocket binding tokens name the one Subscription they bind to.
	SubscriptionID string `json:"subscription_id,omitempty"`
}

// IsAccessToken tells an access token from the other tokens the same key
// signs: an ID token (fhirUser), a refresh token (refresh_secret) or a
// WebSocket binding token (subscription_id) names a login too, but must
// never open the API.
func (c *Claims) IsAccessToken() bool {
	return c.LoginID != "" && c.Username != "" && c.RefreshSecret == "" && c.FHIRUser == "" && c.Nonce == "" && c.SubscriptionID == ""
}

// Key is a signing key with its id.
type Key struct {
	ID      string
	Private *ecdsa.PrivateKey
}

// GenerateKey makes a new P-256 signing key.
func GenerateKey() (*Key, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Key{ID: uuid.NewString(), Private: k}, nil
}

// MarshalPrivate encodes the private key as PKCS#8 PEM for storage.
func (k *Key) MarshalPrivate() (string, error) { return marshalPKCS8(k.Private) }

// marshalPKCS8 encodes a private key (EC or RSA) as PKCS#8 PEM.
func marshalPKCS8(key any) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// parsePKCS8 decodes a PEM key written by marshalPKCS8; what names the key
// in errors.
func parsePKCS8(what, p string) (any, error) {
	b, _ := pem.Decode([]byte(p))
	if b == nil {
		return nil, errors.New(what + ": not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return k, nil
}

// ParsePrivate decodes a PEM key written by MarshalPrivate.
func ParsePrivate(id, p string) (*Key, error) {
	k, err := parsePKCS8("signing key", p)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, errors.New("signing key: not an EC P-256 key")
	}
	return &Key{ID: id, Private: ek}, nil
}

// JWK is one public key as published at /.well-known/jwks.json.
type JWK struct {
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Kty string `json:"kty"`
	Use string `json:"use"`
	// EC keys (P-256).
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	// RSA keys: modulus and exponent.
	N string `json:"n,omitempty"`
	E string `json:"e,omitempty"`
}

// PublicJWK is the key's public half as a JWK.
func (k *Key) PublicJWK() JWK {
	pub := k.Private.PublicKey
	ecdh, _ := pub.ECDH()
	raw := ecdh.Bytes() // 0x04 || X || Y, 32 bytes each
	return JWK{
		Kid: k.ID, Alg: "ES256", Kty: "EC", Use: "sig", Crv: "P-256",
		X: base64.RawURLEncoding.EncodeToString(raw[1:33]),
		Y: base64.RawURLEncoding.EncodeToString(raw[33:65]),
	}
}

// PublicKey decodes a published JWK.
func (j JWK) PublicKey() (*ecdsa.PublicKey, error) {
	if j.Kty != "EC" || j.Crv != "P-256" {
		return nil, fmt.Errorf("jwk %s: unsupported key type %s/%s", j.Kid, j.Kty, j.Crv)
	}
	x, err1 := base64.RawURLEncoding.DecodeString(j.X)
	y, err2 := base64.RawURLEncoding.DecodeString(j.Y)
	if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, fmt.Errorf("jwk %s: bad coordinates", j.Kid)
	}
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
	if _, err := pub.ECDH(); err != nil {
		return nil, fmt.Errorf("jwk %s: point not on curve", j.Kid)
	}
	return pub, nil
}

// Signer issues tokens with one key: Key (ES256), or RSA (RS256) when set.
type Signer struct {
	Key *Key
	// RSA, when set, signs instead of Key: ID tokens, whose clients
	// expect RS256 by default (OIDC Discovery §3).
	RSA    *RSAKey
	Issuer string
}

// Sign fills iss, iat, nbf, exp and jti and signs the claims.
func (s *Signer) Sign(c *Claims, lifetime time.Duration) (string, error) {
	now := time.Now()
	c.Issuer = s.Issuer
	c.IssuedAt = jwt.NewNumericDate(now)
	c.NotBefore = jwt.NewNumericDate(now.Add(-time.Second))
	c.ExpiresAt = jwt.NewNumericDate(now.Add(lifetime))
	if c.ID == "" {
		c.ID = uuid.NewString()
	}
	if s.RSA != nil {
		t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		t.Header["kid"] = s.RSA.ID
		return t.SignedString(s.RSA.Private)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	t.Header["kid"] = s.Key.ID
	return t.SignedString(s.Key.Private)
}

// ErrInvalidToken is every verification failure; the reason stays in logs.
var ErrInvalidToken = errors.New("invalid token")

// Verifier checks tokens against the published keys.
type Verifier struct {
	Issuer   string
	Audience string
	// Keys finds a public key by kid; nil means unknown.
	Keys func(kid string) *ecdsa.PublicKey
	// RSAKeys, when set, lets RS256 tokens (ID tokens) through too, with
	// the key it finds by kid; nil means unknown.
	RSAKeys func(kid string) *rsa.PublicKey
}

// Verify checks algorithm (ES256, and RS256 when RSAKeys is set), kid,
// signature, issuer, audience and the time claims, and returns the claims.
func (v *Verifier) Verify(token string) (*Claims, error) {
	c := &Claims{}
	methods := []string{"ES256"}
	if v.RSAKeys != nil {
		methods = append(methods, "RS256")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(v.Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(5 * time.Second),
	}
	if v.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.Audience))
	}
	_, err := jwt.ParseWithClaims(token, c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("missing kid")
		}
		if t.Method == jwt.SigningMethodRS256 {
			if k := v.RSAKeys(kid); k != nil {
				return k, nil
			}
			return nil, fmt.Errorf("unknown RSA kid %q", kid)
		}
		k := v.Keys(kid)
		if k == nil {
			return nil, fmt.Errorf("unknown kid %q", kid)
		}
		return k, nil
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return c, nil
}
