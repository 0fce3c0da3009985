package repo

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// claims is the collection of unique keys. Its _id index is what makes
// "one user per e-mail per scope" and "one membership per user per project"
// hold under concurrency, on FerretDB and MongoDB alike (neither needs a
// transaction or a partial index for it).
const claims = "unique_keys"

type claimDoc struct {
	ID    string `bson:"_id"`
	Owner string `bson:"owner"`
}

// Claim reserves key for owner. The first claim wins; every later claim of
// the same key returns the winner. Claiming again as the winner is a no-op,
// so a retried step gets the same answer.
func (r *Repo) Claim(ctx context.Context, key, owner string) (string, error) {
	_, err := r.db.Collection(claims).InsertOne(ctx, claimDoc{ID: key, Owner: owner})
	if err == nil {
		return owner, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return "", fmt.Errorf("claim %s: %w", key, err)
	}
	return r.ClaimOwner(ctx, key)
}

// ClaimOwner returns who holds key, or "" if no one does.
func (r *Repo) ClaimOwner(ctx context.Context, key string) (string, error) {
	var d claimDoc
	err := r.db.Collection(claims).FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim %s: %w", key, err)
	}
	return d.Owner, nil
}

// Release frees key if owner still holds it.
func (r *Repo) Release(ctx context.Context, key, owner string) error {
	_, err := r.db.Collection(claims).DeleteOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "owner", Value: owner}})
	if err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// Keys of the unique claims, in one place so every service spells them alike.

// UserEmailKey is the claim of an e-mail by a User: project is "" for
// server-scoped users.
func UserEmailKey(project, email string) string {
	if project == "" {
		project = "-"
	}
	return "user-email:" + project + ":" + email
}

// MembershipKey is the claim of a user's one membership in a project.
func MembershipKey(project, user string) string { return "membership:" + project + ":" + user }

// ExternalIDKey is the claim of a membership externalId in a project.
func ExternalIDKey(project, externalID string) string {
	return "membership-external-id:" + project + ":" + externalID
}

// ProfileKey is the claim of an e-mail by a profile of one type in a
// project, so concurrent invites of one person share one profile.
func ProfileKey(project, resourceType, email string) string {
	return "profile:" + project + ":" + resourceType + ":" + email
}
