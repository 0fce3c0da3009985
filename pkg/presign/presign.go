// Package presign makes and checks the short-lived signed URLs under
// /storage/ through which a browser loads a Binary's content without a
// bearer token (Medplum's presigned storage URLs), and rewrites the
// attachment urls of FHIR JSON into them (rewrite.go).
//
// A URL is <base>storage/<id>/<versionId>?Expires=<unix>&Signature=<mac>,
// the mac an HMAC-SHA256 over the path and the expiry with a key kept in
// the store's secrets, so every instance of every service signs and
// checks alike. Whoever holds a URL may load that one version until it
// expires: a URL is only made for a caller who could read the Binary.
package presign

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// Lifetime is how long a URL works, as Medplum's presigned URLs do.
const Lifetime = time.Hour

// keyName is where the signing key is kept in the store's secrets.
const keyName = "storage-url-key"

// Secrets is the part of the repository that keeps credentials.
type Secrets interface {
	Secret(ctx context.Context, key string) ([]byte, error)
	SwapSecret(ctx context.Context, key string, old, new []byte) error
}

// Signer makes and checks storage URLs.
type Signer struct {
	base    string // the public base URL, ending in "/"
	secrets Secrets
	// Now is the signer's clock; tests move it to sign URLs that have
	// already expired.
	Now func() time.Time

	mu  sync.Mutex
	key []byte // once loaded
}

// New is a signer for URLs under base (the public base URL).
func New(base string, secrets Secrets) *Signer {
	return &Signer{base: base, secrets: secrets, Now: time.Now}
}

// Prefix is what every storage URL starts with.
func (s *Signer) Prefix() string { return s.base + "storage/" }

// URL is the signed URL of one version of a Binary, valid for Lifetime.
func (s *Signer) URL(ctx context.Context, id, versionID string) (string, error) {
	key, err := s.loadKey(ctx)
	if err != nil {
		return "", err
	}
	expires := strconv.FormatInt(s.Now().Add(Lifetime).Unix(), 10)
	q := url.Values{"Expires": {expires}, "Signature": {mac(key, id, versionID, expires)}}
	return s.Prefix() + id + "/" + versionID + "?" + q.Encode(), nil
}

// ErrInvalid is a URL whose signature is missing, malformed or not the
// one this server made for its path and expiry.
var ErrInvalid = errors.New("invalid signature")

// ErrExpired is a genuine URL past its expiry.
var ErrExpired = errors.New("URL has expired")

// Check verifies a storage URL's parts: ErrInvalid unless the signature
// is this server's over id, versionID and expires, ErrExpired after it.
func (s *Signer) Check(ctx context.Context, id, versionID, expires, signature string) error {
	// A mac is 43 characters and a Unix time at most 19 digits: nothing
	// longer is worth hashing.
	if len(signature) != 43 || expires == "" || len(expires) > 19 || !validPart(id) || !validPart(versionID) {
		return ErrInvalid
	}
	key, err := s.loadKey(ctx)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(mac(key, id, versionID, expires)), []byte(signature)) {
		return ErrInvalid
	}
	at, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return ErrInvalid
	}
	if s.Now().Unix() > at {
		return ErrExpired
	}
	return nil
}

// mac signs the path and the expiry; the separators cannot occur in an
// id, a version or a number, so no two URLs sign the same text.
func mac(key []byte, id, versionID, expires string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("/storage/" + id + "/" + versionID + "?Expires=" + expires))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// loadKey loads the key, making it on first use; of two instances making
// it at once, one key wins and both use it.
func (s *Signer) loadKey(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	for range 3 {
		key, err := s.secrets.Secret(ctx, keyName)
		if err == nil && len(key) == 32 {
			s.key = key
			return key, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("storage url key: %w", err)
		}
		fresh := make([]byte, 32)
		_, _ = rand.Read(fresh)
		err = s.secrets.SwapSecret(ctx, keyName, key, fresh)
		if err == nil {
			s.key = fresh
			return fresh, nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("storage url key: %w", err)
		}
	}
	return nil, errors.New("storage url key: could not load or create it")
}
