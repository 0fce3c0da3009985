package repo

import "context"

// Credentials (password hashes, client secrets' digests, signing keys,
// the CSRF key) are kept beside the resources in the store's secrets:
// never searched, never in an event, never a resource a policy could
// expose. The services reach them here, as they reach claims, and never
// the store itself. (A project's secrets, Project.secret, are resource
// fields, not these.)

// Secret returns the credential stored under key; store.ErrNotFound if
// there is none.
func (r *Repo) Secret(ctx context.Context, key string) ([]byte, error) {
	return r.st.Secret(ctx, key)
}

// SetSecret stores a credential whatever key held; nil deletes it.
func (r *Repo) SetSecret(ctx context.Context, key string, value []byte) error {
	return r.st.SetSecret(ctx, key, value)
}

// SwapSecret replaces a credential only if it still holds old: old nil
// means key must hold none (store.ErrExists otherwise), and a different
// value is store.ErrConflict. new nil deletes it.
func (r *Repo) SwapSecret(ctx context.Context, key string, old, new []byte) error {
	return r.st.SwapSecret(ctx, key, old, new)
}
