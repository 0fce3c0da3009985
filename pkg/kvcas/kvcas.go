// Package kvcas names the one answer every compare-and-set write of a
// JetStream key-value bucket must tell apart: the key changed since the
// revision the write was made at.
package kvcas

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Conflict reports whether err says a key changed since the revision a
// Create, Update or Delete (with LastRevision) was made at. A replicated
// bucket reports it with another code (10164, not 10071); nats.go maps
// both to ErrKeyRevisionMismatch, and a Create's to ErrKeyExists, so the
// code alone misses a cluster's conflicts.
func Conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
