package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// MinSecretLength is the shortest client secret accepted from configuration.
const MinSecretLength = 32

// NewSecret returns 256 random bits as 64 hex characters.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // the system's randomness is broken: nothing is safe to do
	}
	return hex.EncodeToString(b)
}

// SecretDigest is what is stored for a client secret: its SHA-256. A secret
// of 256 random bits needs no slow hash, and token issuance stays cheap.
func SecretDigest(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(d[:])
}

// SecretMatches compares a presented secret with a stored digest in constant time.
func SecretMatches(digest, secret string) bool {
	if digest == "" {
		return false
	}
	want, err := hex.DecodeString(digest)
	if err != nil {
		return false
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(want, got[:]) == 1
}

// Password hashing parameters (argon2id, OWASP's first recommendation).
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// hashSlots bounds the password hashes running at once. Each argon2id hash
// holds argonMemory (19 MiB) and a core for tens of milliseconds: without a
// bound, a burst of sign-ins takes gigabytes and every core, and a hash
// waiting for a core gains nothing over one refused. About one per core
// keeps the cores busy and the memory small.
var hashSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// hashWait is how long a hash waits for a slot before its caller is told
// to come back (503 with Retry-After): longer waits only pile up requests.
const hashWait = 2 * time.Second

// slotProbe, when set (by tests), is told when a hash starts waiting for a
// slot ("wait"), runs in one ("run") and gives it back ("done").
var slotProbe func(stage string)

func probe(stage string) {
	if slotProbe != nil {
		slotProbe(stage)
	}
}

// argonKey runs argon2id in a hash slot, or answers fhir.Busy when none is
// free within hashWait (or before ctx ends): then no hash runs.
func argonKey(ctx context.Context, password, salt []byte, t, m uint32, p uint8, n uint32) ([]byte, error) {
	probe("wait")
	ctx, cancel := context.WithTimeout(ctx, hashWait)
	defer cancel()
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, fhir.Busy("Too many password checks at once; try again shortly")
	}
	defer func() {
		probe("done")
		<-hashSlots
	}()
	probe("run")
	return argon2.IDKey(password, salt, t, m, p, n), nil
}

// HashPassword hashes a password with argon2id in the PHC string format. At
// the bound of hashes running at once it answers fhir.Busy (503).
func HashPassword(ctx context.Context, password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		panic(err)
	}
	key, err := argonKey(ctx, []byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	if err != nil {
		return "", err
	}
	return phcString(salt, key), nil
}

func phcString(salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// DecoyHash is a hash no password matches, with HashPassword's parameters:
// checking a password against it costs what checking a real one does, but
// making it costs nothing (it is random bytes, not a hash).
func DecoyHash() string {
	b := make([]byte, 16+argonKeyLen)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return phcString(b[:16], b[16:])
}

// maxHashMemory bounds the memory (KiB) a stored hash may ask of argon2:
// a hash read from the store is data, and the bound on hashes at once
// assumes each costs about argonMemory.
const maxHashMemory = 64 * 1024

// CheckPassword verifies a password against a HashPassword result. At the
// bound of hashes running at once it answers fhir.Busy (503).
func CheckPassword(ctx context.Context, hash, password string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errors.New("password hash: unknown format")
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return false, fmt.Errorf("password hash: %w", err)
	}
	if m > maxHashMemory || t > 16 || p == 0 || p > 4 {
		return false, errors.New("password hash: parameters out of bounds")
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 || len(want) > 64 {
		return false, errors.New("password hash: bad encoding")
	}
	got, err := argonKey(ctx, []byte(password), salt, t, m, p, uint32(len(want)))
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(want, got) == 1, nil
}

// ConsoleClientID is the client the administration console (gateway/console)
// signs people in as; no ClientApplication is stored for it.
const ConsoleClientID = "pinion-console"

// CLIClientID is Medplum's CLI, a client every Pinion knows without a
// stored ClientApplication (identity's clients package describes it).
const CLIClientID = "medplum-cli"

// BuiltinClient reports whether id names a client that is no stored
// ClientApplication: the console or Medplum's CLI.
func BuiltinClient(id string) bool { return id == ConsoleClientID || id == CLIClientID }
