package projects

import "encoding/json"

// Setting reads a boolean Project.setting (mfaRequired, auditReads, ...)
// from a Project's JSON: its value, and whether the project sets it at all
// (each setting has its own default).
func Setting(project []byte, name string) (value, set bool) {
	var p struct {
		Setting []struct {
			Name         string `json:"name"`
			ValueBoolean *bool  `json:"valueBoolean"`
		} `json:"setting"`
	}
	if json.Unmarshal(project, &p) != nil {
		return false, false
	}
	for _, st := range p.Setting {
		if st.Name == name && st.ValueBoolean != nil {
			return *st.ValueBoolean, true
		}
	}
	return false, false
}
