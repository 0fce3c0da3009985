package access

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// Admin and ProjectAdmin: anonymous is 401, a member who is not an admin
// 403, an admin of another project 403 for the project's routes.
func TestAdminRules(t *testing.T) {
	member := &bus.Principal{Project: "p1"}
	admin := &bus.Principal{Project: "p1", Admin: true}
	super := &bus.Principal{Project: "sa", SuperAdmin: true}
	status := func(err error) int {
		if err == nil {
			return 200
		}
		return err.(*fhir.Error).Status
	}
	for _, c := range []struct {
		name       string
		p          *bus.Principal
		admin, own int // Admin, ProjectAdmin of p1
	}{
		{"anonymous", nil, 401, 401},
		{"member", member, 403, 403},
		{"admin", admin, 200, 200},
		{"another project's admin", &bus.Principal{Project: "p2", Admin: true}, 200, 403},
		{"super admin", super, 200, 200},
	} {
		if got := status(Admin(c.p)); got != c.admin {
			t.Errorf("%s: Admin %d, want %d", c.name, got, c.admin)
		}
		if got := status(ProjectAdmin(c.p, "p1")); got != c.own {
			t.Errorf("%s: ProjectAdmin %d, want %d", c.name, got, c.own)
		}
	}
}
