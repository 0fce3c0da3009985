// Package clientsecret keeps a ClientApplication's current secret where its
// project's admins can read it again, as Medplum's web app shows it on the
// client's page, while the resource itself never holds it.
//
// The identity service stores a client's credentials (the digests it signs
// in with) under Key(id). Beside the digests it stores the current secret
// sealed with AES-256-GCM (Seal), under a key kept in the same store's
// credentials; the fhir service opens it (Shown) for a project admin's read
// or search of the client. A reader of the store can therefore read the
// secrets, as in Medplum: see docs/decisions/identity.md, "Secrets".
package clientsecret

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/pinion-health/pinion/pkg/store"
)

// Credentials is the part of the store's credentials (repo.Repo) this
// package needs.
type Credentials interface {
	Secret(ctx context.Context, key string) ([]byte, error)
	SwapSecret(ctx context.Context, key string, old, new []byte) error
}

// Key is where a client's credentials are stored.
func Key(clientID string) string { return "ClientApplication/" + clientID }

// sealKey is where the key that seals shown secrets is stored: one for the
// whole store, made by whichever instance needs it first.
const sealKey = "clientsecret/seal-key"

// Keeper seals and opens shown secrets; it loads the sealing key once.
type Keeper struct {
	creds Credentials
	mu    sync.Mutex
	aead  cipher.AEAD
}

// New is a Keeper over the store's credentials.
func New(creds Credentials) *Keeper { return &Keeper{creds: creds} }

// keepers are the Keepers For made, one per store, so that the sealing key
// is read once per process rather than at every read of a client.
var keepers sync.Map // Credentials → *Keeper

// For is the process's Keeper over creds.
func For(creds Credentials) *Keeper {
	if k, ok := keepers.Load(creds); ok {
		return k.(*Keeper)
	}
	k, _ := keepers.LoadOrStore(creds, New(creds))
	return k.(*Keeper)
}

// cipher is the sealing cipher, made from the stored key, which is created
// when there is none (of two instances creating it at once, one wins and
// the other reads the winner's).
func (k *Keeper) cipher(ctx context.Context) (cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.aead != nil {
		return k.aead, nil
	}
	key, err := k.creds.Secret(ctx, sealKey)
	if errors.Is(err, store.ErrNotFound) {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		err = k.creds.SwapSecret(ctx, sealKey, nil, key)
		if errors.Is(err, store.ErrExists) {
			key, err = k.creds.Secret(ctx, sealKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("client secret sealing key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("client secret sealing key: %w", err)
	}
	if k.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	return k.aead, nil
}

// Seal is secret sealed for client clientID (the id is bound in, so a
// sealed secret copied to another client's record does not open there).
func (k *Keeper) Seal(ctx context.Context, clientID, secret string) (string, error) {
	a, err := k.cipher(ctx)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawStdEncoding.EncodeToString(a.Seal(nonce, nonce, []byte(secret), []byte(clientID))), nil
}

// open is the secret a Seal made for clientID.
func (k *Keeper) open(ctx context.Context, clientID, sealed string) (string, error) {
	a, err := k.cipher(ctx)
	if err != nil {
		return "", err
	}
	b, err := base64.RawStdEncoding.DecodeString(sealed)
	if err != nil || len(b) < a.NonceSize() {
		return "", fmt.Errorf("client %s: sealed secret is malformed", clientID)
	}
	plain, err := a.Open(nil, b[:a.NonceSize()], b[a.NonceSize():], []byte(clientID))
	if err != nil {
		return "", fmt.Errorf("client %s: sealed secret does not open: %w", clientID, err)
	}
	return string(plain), nil
}

// Record is the field of a client's stored credentials this package
// reads; the identity service's record embeds it.
type Record struct {
	// Shown is the current secret, sealed; empty for clients whose secret
	// was made before secrets were kept (rotating it keeps the new one).
	Shown string `json:"shown,omitempty"`
}

// Shown is client clientID's current secret, "" when none is kept.
func (k *Keeper) Shown(ctx context.Context, clientID string) (string, error) {
	raw, err := k.creds.Secret(ctx, Key(clientID))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var r Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", fmt.Errorf("client %s credentials: %w", clientID, err)
	}
	if r.Shown == "" {
		return "", nil
	}
	return k.open(ctx, clientID, r.Shown)
}
