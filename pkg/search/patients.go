package search

// Patients lists the patients a resource belongs to, as "Patient/<id>":
// a Patient itself, or the patients its patient and subject parameters
// name. It is the rule a patient/ scope reaches a type by
// (access.compartment), and the one the audit trail names the patients a
// request touched by. (FHIR's Patient compartment has more parameters per
// type, such as performer; they are not followed here either.)
func Patients(resourceType, id string, resource map[string]any) []string {
	if resourceType == "Patient" {
		return []string{"Patient/" + id}
	}
	var out set
	var vals []value
	r := loadRegistry()
	for _, code := range [...]string{"patient", "subject"} {
		p := r.lookup(resourceType, code)
		if p == nil || p.Type != "reference" {
			continue
		}
		vals = p.eval(resource, vals[:0])
		for _, v := range vals {
			m, ok := v.v.(map[string]any)
			if !ok {
				continue
			}
			if typ, pid, ok := splitRef(str(m, "reference")); ok && typ == "Patient" {
				out.add("Patient/" + pid)
			}
		}
	}
	return out
}
