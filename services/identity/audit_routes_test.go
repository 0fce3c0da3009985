package identity

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// Every route the trail records by route is one identity serves: a
// renamed route cannot silently stop being recorded.
func TestAuditedRoutesAreServed(t *testing.T) {
	for route := range auditedRoutes {
		found := false
		for _, r := range bus.Routes {
			found = found || r.Method+" "+r.Path == route && r.Service == "identity"
		}
		if !found {
			t.Errorf("%s is not a route of identity", route)
		}
	}
}
