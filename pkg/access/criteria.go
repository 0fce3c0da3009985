package access

import (
	"fmt"
	"strings"

	"github.com/pinion-health/pinion/pkg/access/criteria"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
)

// CheckPolicy refuses an AccessPolicy entry whose criteria could never
// work: criteria that do not parse, that search another type than their
// entry's, or that name a search parameter the type does not have.
// Medplum stores such a policy and fails every request of a member under
// it; here the write is refused, saying which entry is wrong.
func CheckPolicy(res map[string]any) error {
	list, _ := res["resource"].([]any)
	for i, e := range list {
		m, _ := e.(map[string]any)
		typ, _ := m["resourceType"].(string)
		crit, _ := m["criteria"].(string)
		if crit == "" {
			continue
		}
		expr := fmt.Sprintf("AccessPolicy.resource[%d].criteria", i)
		c, err := criteria.Parse(crit, criteria.Params{})
		if err != nil {
			return fhir.BadRequest("Invalid criteria: "+err.Error(), expr)
		}
		if c.Type != typ {
			return fhir.BadRequest("Criteria must search "+typ+", the entry's resource type, not "+c.Type, expr)
		}
		known := map[string]bool{}
		for _, p := range search.Params(typ) {
			known[p.Code] = true
		}
		for k := range c.Query {
			code, _, _ := strings.Cut(k, ":")
			if strings.Contains(code, ".") {
				continue // a chained parameter: its checks are the search's
			}
			if !known[code] {
				return fhir.BadRequest("Unknown search parameter in criteria: "+code, expr)
			}
		}
	}
	return nil
}
