package access

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pinion-health/pinion/pkg/access/criteria"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// AddressRules are a membership's ipAccessRule entries, as Medplum
// combines them: those of accessPolicy, then of each access[] entry's
// policy, in order, with the entry's parameters filled in. The gateway
// applies them to every request (session.Membership.AllowsAddress), and
// identity at sign-in and at the token endpoint.
//
// A policy that cannot be read adds no rule here; the same membership's
// requests fail closed anyway, as its policy cannot be compiled.
func AddressRules(ctx context.Context, store Reader, membership *repo.Resource) ([]session.AddressRule, error) {
	var m membershipDoc
	if err := json.Unmarshal(membership.JSON, &m); err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	grants, err := m.grants()
	if err != nil {
		return nil, nil
	}
	var out []session.AddressRule
	for _, g := range grants {
		typ, id, ok := fhir.SplitReference(g.ref)
		if !ok || typ != "AccessPolicy" {
			continue
		}
		res, err := store.Read(ctx, repo.Scope{Project: membership.Project}, "AccessPolicy", id)
		if err != nil {
			if fhir.Missing(err) {
				continue
			}
			return nil, err
		}
		var doc policyDoc
		if json.Unmarshal(res.JSON, &doc) != nil {
			continue
		}
		for _, r := range doc.IPAccessRule {
			v, unresolved, err := criteria.Substitute(r.Value, g.params)
			if err != nil || unresolved != "" || v == "" {
				continue // names a parameter the membership does not give: matches nothing
			}
			switch r.Action {
			case "allow":
				out = append(out, session.AddressRule{Value: v})
			case "block":
				out = append(out, session.AddressRule{Value: v, Block: true})
			}
		}
	}
	return out, nil
}
