package access

import (
	"maps"
	"slices"
	"strings"
)

// Document is a policy as an AccessPolicy resource: what Medplum's
// /auth/me sends as accessPolicy (its getAccessPolicyForLogin), the
// membership's policies with their parameters in, one after another, and
// the entries every admin gets. Medplum's clients read it to decide what
// to offer for editing; the server decides by the compiled policy, never
// by this.
type Document struct {
	ResourceType string         `json:"resourceType"`
	Resource     []ResourceRule `json:"resource"`
}

// Document shows the compiled policy as its entries say it: the criteria
// with the values in, the interactions unless all of them (readonly when
// they only read), and the hidden and read-only fields. A super admin
// without a policy has every type, the project-admin ones named, for
// Medplum's clients never read those into "*".
func (p *Policy) Document() Document {
	d := Document{ResourceType: "AccessPolicy", Resource: []ResourceRule{}}
	if p.unrestricted {
		d.Resource = append(d.Resource, ResourceRule{ResourceType: "*"})
		for _, typ := range slices.Sorted(maps.Keys(adminTypes)) {
			d.Resource = append(d.Resource, ResourceRule{ResourceType: typ})
		}
		return d
	}
	for _, e := range p.entries {
		if e.allow == 0 {
			continue
		}
		r := ResourceRule{ResourceType: e.typ, Criteria: e.criteria,
			HiddenFields: joinedPaths(e.hidden), ReadonlyFields: joinedPaths(e.readonly)}
		if e.allow != allBits {
			r.Interaction = interactions(e.allow)
			r.Readonly = e.allow&^readBits == 0
		}
		d.Resource = append(d.Resource, r)
	}
	return d
}

// joinedPaths writes field paths as policies do ("site.recaptchaSecretKey").
func joinedPaths(paths [][]string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, strings.Join(p, "."))
	}
	return out
}
