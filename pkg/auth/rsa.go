package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"

	"github.com/google/uuid"
)

// rsaBits is the size of a new RSA key: the least RFC 7518 §3.3 allows
// for RS256, and what OpenID providers commonly publish.
const rsaBits = 2048

// RSAKey is an RSA signing key with its id. ID tokens are signed with it
// (RS256): OpenID Connect clients that registered no
// id_token_signed_response_alg expect RS256 and nothing else.
type RSAKey struct {
	ID      string
	Private *rsa.PrivateKey
}

// GenerateRSAKey makes a new 2048-bit RSA signing key.
func GenerateRSAKey() (*RSAKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		return nil, err
	}
	return &RSAKey{ID: uuid.NewString(), Private: k}, nil
}

// MarshalPrivate encodes the private key as PKCS#8 PEM for storage.
func (k *RSAKey) MarshalPrivate() (string, error) { return marshalPKCS8(k.Private) }

// ParseRSAPrivate decodes a PEM key written by RSAKey.MarshalPrivate.
func ParseRSAPrivate(id, p string) (*RSAKey, error) {
	k, err := parsePKCS8("RSA signing key", p)
	if err != nil {
		return nil, err
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok || rk.N.BitLen() < rsaBits {
		return nil, errors.New("RSA signing key: not an RSA key of at least 2048 bits")
	}
	return &RSAKey{ID: id, Private: rk}, nil
}

// PublicJWK is the key's public half as a JWK (RFC 7518 §6.3.1).
func (k *RSAKey) PublicJWK() JWK {
	pub := k.Private.PublicKey
	return JWK{
		Kid: k.ID, Alg: "RS256", Kty: "RSA", Use: "sig",
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}
}

// RSAPublicKey decodes a published RSA JWK.
func (j JWK) RSAPublicKey() (*rsa.PublicKey, error) {
	if j.Kty != "RSA" {
		return nil, fmt.Errorf("jwk %s: not an RSA key", j.Kid)
	}
	n, err1 := base64.RawURLEncoding.DecodeString(j.N)
	e, err2 := base64.RawURLEncoding.DecodeString(j.E)
	if err1 != nil || err2 != nil || len(n)*8 < rsaBits || len(e) == 0 || len(e) > 4 {
		return nil, fmt.Errorf("jwk %s: bad modulus or exponent", j.Kid)
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
}
