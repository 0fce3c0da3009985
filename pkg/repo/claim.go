package repo

import "context"

// Claim reserves key for owner. The first claim wins; every later claim of
// the same key returns the winner. Claiming again as the winner is a no-op,
// so a retried step gets the same answer. This is what makes "one user per
// e-mail per scope" and "one membership per user per project" hold under
// concurrency, in every store.
func (r *Repo) Claim(ctx context.Context, key, owner string) (string, error) {
	return r.st.Claim(ctx, key, owner)
}

// ClaimOwner returns who holds key, or "" if no one does.
func (r *Repo) ClaimOwner(ctx context.Context, key string) (string, error) {
	return r.st.ClaimOwner(ctx, key)
}

// Release frees key if owner still holds it.
func (r *Repo) Release(ctx context.Context, key, owner string) error {
	return r.st.Release(ctx, key, owner)
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
