package projects

// MFARequiredURL is the extension on a ProjectMembership by which its
// project requires a second factor of that member (an invite's
// mfaRequired; valueBoolean true). Medplum sets User.mfaRequired, which
// reaches every project the person is in; here a project's requirement
// applies when signing in to that project and nowhere else, so it lives
// on the membership, written in the same step that makes it.
const MFARequiredURL = "https://pinion.health/fhir/StructureDefinition/mfa-required"

// RequireMFA marks a membership (as a JSON object) as requiring a second
// factor, keeping its other extensions.
func RequireMFA(membership map[string]any) {
	list, _ := membership["extension"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["url"] == MFARequiredURL {
			m["valueBoolean"] = true
			return
		}
	}
	membership["extension"] = append(list, map[string]any{"url": MFARequiredURL, "valueBoolean": true})
}

// extension is one element of a resource's extension list, as read here.
type extension struct {
	URL          string `json:"url"`
	ValueBoolean *bool  `json:"valueBoolean"`
}

// mfaRequired reports whether a membership's extensions require a factor.
func mfaRequired(list []extension) bool {
	for _, e := range list {
		if e.URL == MFARequiredURL && e.ValueBoolean != nil && *e.ValueBoolean {
			return true
		}
	}
	return false
}
