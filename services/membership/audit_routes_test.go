package membership

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/audit"
)

// Every route the trail records by route is one membership serves.
func TestAuditedRoutesAreServed(t *testing.T) {
	if missing := audit.Unserved(auditedRoutes, "membership"); len(missing) > 0 {
		t.Errorf("not routes of membership: %v", missing)
	}
}
