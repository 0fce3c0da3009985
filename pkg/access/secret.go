package access

import (
	"bytes"
	"maps"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// A Subscription's secret signs its rest-hook notifications: whoever reads
// it can forge them. Only the project's admins (and super admins) and the
// subscription's author see it; for everyone else Redact removes the
// extension, on reads, searches, history and batch alike. The author is
// the version's meta.author, which the repository sets to the writer's
// profile on every write: so a member who cannot see a subscription's
// secret may not update or patch it either (secretWriteError): keeping the
// secret would make them its author, who sees it, and dropping it would
// silently stop the signatures its receiver checks.

// secretURLs are the extension URLs Medplum has used for the secret
// (pkg/subscription reads both).
var secretURLs = []string{
	subscription.ExtSecret,
	"https://www.medplum.com/fhir/StructureDefinition-subscriptionSecret",
}

// mayHideSecret reports whether a stored version may carry a secret the
// caller is not to see, cheaply: a byte search, before any decoding.
func (p *Policy) mayHideSecret(res *repo.Resource) bool {
	if res.Type != "Subscription" || p.admin || p.allProjects {
		return false
	}
	for _, u := range secretURLs {
		if bytes.Contains(res.JSON, []byte(u)) {
			return true
		}
	}
	return false
}

// stripSecret removes the secret extensions from a decoded Subscription
// unless the caller is its author; it reports whether it removed any.
func (p *Policy) stripSecret(m map[string]any) bool {
	if p.profile != "" {
		meta, _ := m["meta"].(map[string]any)
		author, _ := meta["author"].(map[string]any)
		if ref, _ := author["reference"].(string); ref == p.profile {
			return false
		}
	}
	exts, _ := m["extension"].([]any)
	kept := exts[:0:0]
	for _, x := range exts {
		if e, ok := x.(map[string]any); ok && isSecretURL(e["url"]) {
			continue
		}
		kept = append(kept, x)
	}
	if len(kept) == len(exts) {
		return false
	}
	if len(kept) == 0 {
		delete(m, "extension")
	} else {
		m["extension"] = kept
	}
	return true
}

func isSecretURL(v any) bool {
	s, _ := v.(string)
	for _, u := range secretURLs {
		if s == u {
			return true
		}
	}
	return false
}

// secretWriteError refuses a change to a stored Subscription whose secret
// the caller does not see; nil for any other write.
func (p *Policy) secretWriteError(before *repo.Resource, old map[string]any) error {
	if before == nil || !p.mayHideSecret(before) {
		return nil
	}
	if !p.stripSecret(maps.Clone(old)) {
		return nil
	}
	return fhir.ForbiddenText("This Subscription has a secret that only its author and project administrators see; only they can change it")
}
