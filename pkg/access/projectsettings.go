package access

import (
	"reflect"
	"slices"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// A project's admins change their Project only where it is theirs to
// decide: its name and description, who may sign up as a patient and
// under which policy (defaultPatientAccessPolicy) and the project
// settings Pinion reads. The
// rest decides what the server grants the project (features, superAdmin,
// links, systemSetting), who owns it, or has its own /admin route
// (secret, site): super admins only. Medplum lets admins write all but
// features, link and systemSetting, silently keeping those; Pinion
// refuses the rest by name. (That the policy named is one of the project's
// own is a write rule, in pkg/writerules.)
const adminProjectField = "defaultPatientAccessPolicy"

// AdminProjectSettings are the Project.setting entries, by name, that a
// project's admins may add, change or remove: those Pinion reads
// (identity's mfaRequired, requireVerifiedEmail, requireExternalSignIn and
// trustIdentityProviderMfa; fhir's auditReads, whether reads of patients'
// records are recorded, which the trail itself records the change of).
var AdminProjectSettings = []string{"mfaRequired", "requireVerifiedEmail", "requireExternalSignIn", "trustIdentityProviderMfa", "auditReads"}

// adminProjectText are the Project's plain fields its admins may change,
// as in Medplum: what the project is called and described as.
var adminProjectText = []string{"name", "description"}

// adminProjectWriteText is the 403 for an admin's change of anything else.
func adminProjectWriteError(field string) error {
	e := fhir.ForbiddenText("Project administrators may change only " + strings.Join(adminProjectText, ", ") +
		", defaultPatientAccessPolicy and the settings " + strings.Join(AdminProjectSettings, ", ") +
		" of their project; " + field + " is for super admins")
	e.Outcome.Issue[0].Expression = []string{field}
	return e
}

// checkAdminProjectWrite refuses an admin's Project write that changes
// anything but the fields above; old is the stored version (hidden fields
// already put back into after).
func checkAdminProjectWrite(old, after map[string]any) error {
	keys := make([]string, 0, len(old)+len(after))
	for k := range old {
		keys = append(keys, k)
	}
	for k := range after {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		switch k {
		case "resourceType", "id", adminProjectField, adminProjectText[0], adminProjectText[1]:
			continue
		case "setting":
			if !reflect.DeepEqual(otherSettings(old), otherSettings(after)) {
				return adminProjectWriteError("setting")
			}
			continue
		}
		if changed(old, after, []string{k}) {
			return adminProjectWriteError(k)
		}
	}
	return nil
}

// otherSettings are a Project's setting entries admins may not change, in
// order.
func otherSettings(p map[string]any) []any {
	list, _ := p["setting"].([]any)
	var out []any
	for _, s := range list {
		if m, ok := s.(map[string]any); ok {
			if name, _ := m["name"].(string); slices.Contains(AdminProjectSettings, name) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}
