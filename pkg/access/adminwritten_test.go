package access

import (
	"fmt"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// The role matrix of the admin-written types: who may create, update,
// patch and delete ClientApplication, AccessPolicy and Bot (and, as before,
// Project and ProjectMembership) through a policy, as the fhir service and
// $deploy ask it. Reads stay as the policy says.
func TestAdminWrittenTypes(t *testing.T) {
	types := []string{"ClientApplication", "AccessPolicy", "Bot", "Project", "ProjectMembership"}
	namingAll := map[string]any{"resource": []any{}}
	for _, typ := range types {
		namingAll["resource"] = append(namingAll["resource"].([]any), map[string]any{"resourceType": typ})
	}
	withPolicy := func(p *bus.Principal, body map[string]any) *Policy {
		p.AccessPolicy = true
		return compile(t, p, map[string]any{"profile": ref(p.Profile), "accessPolicy": ref("AccessPolicy/x")},
			map[string]any{"AccessPolicy/x": body})
	}
	admin := member("Practitioner/admin")
	admin.Admin = true
	adminWithStar := member("Practitioner/admin2")
	adminWithStar.Admin = true
	super := &bus.Principal{SuperAdmin: true, Project: "sp", Profile: "ClientApplication/sa"}
	superWithStar := &bus.Principal{SuperAdmin: true, Project: "sp", Profile: "ClientApplication/sa", Membership: "sm"}

	const (
		allowed = "allowed"
		refused = "admins only" // 403 saying only administrators change the type
		denied  = "403"         // 403, as before: these go through /admin
		// an admin's Project: created and deleted by super admins only;
		// another project's not even seen (404); their own is
		// TestAdminProjectSettings's.
		notTheirs = "not theirs"
	)
	// want is per type, in the order of types.
	rows := []struct {
		role string
		pol  *Policy
		want [5]string
	}{
		{"project admin without a policy", compile(t, admin, nil, nil), [5]string{allowed, allowed, allowed, notTheirs, denied}},
		{"project admin with a '*' policy", withPolicy(adminWithStar, map[string]any{"resource": []any{map[string]any{"resourceType": "*"}}}),
			[5]string{allowed, allowed, allowed, notTheirs, denied}},
		{"member without a policy", compile(t, member("Practitioner/doc"), nil, nil), [5]string{refused, refused, refused, denied, denied}},
		{"member with a '*' policy", withPolicy(member("Practitioner/doc"), map[string]any{"resource": []any{map[string]any{"resourceType": "*"}}}),
			[5]string{refused, refused, refused, denied, denied}},
		{"member with '*' narrowed by criteria", withPolicy(member("Practitioner/doc"), map[string]any{"resource": []any{
			map[string]any{"resourceType": "*", "criteria": "Bot?name=x"},
			map[string]any{"resourceType": "*", "criteria": "ClientApplication?name=x"},
			map[string]any{"resourceType": "*", "criteria": "AccessPolicy?name=x"},
		}}), [5]string{refused, refused, refused, denied, denied}},
		{"member whose policy names the types", withPolicy(member("Practitioner/doc"), namingAll), [5]string{allowed, allowed, allowed, denied, denied}},
		{"super admin", compile(t, super, nil, nil), [5]string{allowed, allowed, allowed, allowed, allowed}},
		{"super admin with a '*' policy", withPolicy(superWithStar, map[string]any{"resource": []any{map[string]any{"resourceType": "*"}}}),
			[5]string{allowed, allowed, allowed, allowed, allowed}},
	}
	for _, row := range rows {
		for ti, typ := range types {
			for _, i := range []Interaction{Create, Update, Patch, Delete} {
				t.Run(fmt.Sprintf("%s/%s/%s", row.role, typ, i), func(t *testing.T) {
					err := writeAs(row.pol, typ, i)
					switch want := row.want[ti]; want {
					case allowed:
						if err != nil {
							t.Fatalf("refused: %v", err)
						}
					case refused:
						fe := fhir.AsError(err)
						if err == nil || fe.Status != 403 || fe.Message() != "Only project administrators can change "+typ+" resources" {
							t.Fatalf("%v, want 403 saying only administrators change %s", err, typ)
						}
					case denied:
						if status(err) != 403 {
							t.Fatalf("%v, want 403", err)
						}
					case notTheirs:
						want := 403
						if i == Update || i == Patch {
							want = 404
						}
						if status(err) != want {
							t.Fatalf("%v, want %d", err, want)
						}
					}
				})
			}
			// Reads are the policy's, whatever the writes.
			if ti < 3 {
				if err := row.pol.AllowResource(typ, "r1", Read); err != nil {
					t.Errorf("%s: read %s refused: %v", row.role, typ, err)
				}
			}
		}
	}
	// Check, the fixed rules alone, keeps Project and ProjectMembership
	// writes from everyone but super admins, except an admin's update of
	// a Project (which the policy then confines to fields of their own).
	if Check(admin, "Project", Update) != nil || Check(admin, "Project", Patch) != nil || status(Check(admin, "Project", Delete)) != 403 {
		t.Error("Check: an admin's Project update refused, or its delete allowed")
	}
	for _, typ := range []string{"Project", "ProjectMembership"} {
		for _, p := range []*bus.Principal{admin, member("Practitioner/doc")} {
			if status(Check(p, typ, Update)) != 403 && !(p == admin && typ == "Project") {
				t.Errorf("Check lets %+v update %s", p, typ)
			}
		}
		if Check(super, typ, Update) != nil {
			t.Errorf("Check refuses a super admin's update of %s", typ)
		}
	}
}

// writeAs asks a policy what the fhir service asks of a write: the type
// and interaction (target), then the write itself on a stored resource of
// the project (Gate's Current, Create and Update).
func writeAs(pol *Policy, typ string, i Interaction) error {
	if err := pol.AllowResource(typ, "r1", i); err != nil {
		return err
	}
	body := map[string]any{"resourceType": typ, "id": "r1", "name": "x"}
	if i == Create {
		return pol.Write(i, typ, nil, body, project)
	}
	cur := stored(typ, "r1", `{"resourceType":"`+typ+`","id":"r1","name":"x"}`)
	if i == Delete {
		body = nil
	}
	return pol.Write(i, typ, cur, body, project)
}

// The /admin routes that write these types say why a member is refused;
// an admin of another project, or an anonymous caller, gets what
// ProjectAdmin says.
func TestAdminWrite(t *testing.T) {
	for _, c := range []struct {
		name    string
		p       *bus.Principal
		project string
		status  int
		text    string
	}{
		{"anonymous", nil, "p1", 401, "Unauthorized"},
		{"member", &bus.Principal{Project: "p1"}, "p1", 403, "Only project administrators can change Bot resources"},
		{"member, own project", &bus.Principal{Project: "p1"}, "", 403, "Only project administrators can change Bot resources"},
		{"another project's admin", &bus.Principal{Project: "p2", Admin: true}, "p1", 403, "Forbidden"},
		{"admin", &bus.Principal{Project: "p1", Admin: true}, "p1", 0, ""},
		{"admin, own project", &bus.Principal{Project: "p1", Admin: true}, "", 0, ""},
		{"super admin", &bus.Principal{Project: "sa", SuperAdmin: true}, "p1", 0, ""},
	} {
		err := AdminWrite(c.p, c.project, "Bot")
		if status(err) != c.status || err != nil && fhir.AsError(err).Message() != c.text {
			t.Errorf("%s: %v, want %d %q", c.name, err, c.status, c.text)
		}
	}
}
