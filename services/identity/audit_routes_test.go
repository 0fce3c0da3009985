package identity

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/audit"
)

// Every route the trail records by route is one identity serves.
func TestAuditedRoutesAreServed(t *testing.T) {
	if missing := audit.Unserved(auditedRoutes, "identity"); len(missing) > 0 {
		t.Errorf("not routes of identity: %v", missing)
	}
}
