package presign

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// CallerResolver resolves Binaries as caller may read them, through its
// access policy: a Binary it may not read, or whose securityContext it
// may not read (as Medplum checks), is not signed.
func CallerResolver(policies *access.Policies, r *repo.Repo, caller *bus.Principal) Resolver {
	var pol *access.Policy
	return func(ctx context.Context, id, versionID string) (string, bool, error) {
		if caller == nil {
			return "", false, nil
		}
		if pol == nil {
			p, err := policies.For(ctx, caller)
			if err != nil {
				return "", false, err
			}
			pol = p
		}
		res, err := read(ctx, pol, r, "Binary", id, versionID)
		if err != nil || res == nil {
			return "", false, err
		}
		var b struct {
			SecurityContext *fhir.Reference `json:"securityContext"`
		}
		if err := json.Unmarshal(res.JSON, &b); err != nil {
			return "", false, err
		}
		if b.SecurityContext != nil && b.SecurityContext.Reference != "" {
			typ, scID, ok := fhir.SplitReference(b.SecurityContext.Reference)
			if !ok {
				return "", false, nil
			}
			sc, err := read(ctx, pol, r, typ, scID, "")
			if err != nil || sc == nil {
				return "", false, err
			}
		}
		return res.VersionID, true, nil
	}
}

// read reads typ/id (at versionID, if given) through pol; nil, with no
// error, when the policy or the store refuses it.
func read(ctx context.Context, pol *access.Policy, r *repo.Repo, typ, id, versionID string) (*repo.Resource, error) {
	i := access.Read
	if versionID != "" {
		i = access.VRead
	}
	if pol.AllowResource(typ, id, i) != nil {
		return nil, nil
	}
	g := pol.Gate(r, typ, id)
	var res *repo.Resource
	var err error
	if versionID == "" {
		res, err = g.Read(ctx, id)
	} else {
		res, err = g.VRead(ctx, id, versionID)
	}
	var fe *fhir.Error
	if errors.As(err, &fe) && fe.Status < 500 || fhir.Missing(err) {
		return nil, nil
	}
	return res, err
}
