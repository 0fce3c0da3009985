// Package access decides who may do what to which resources: a
// membership's AccessPolicy resources, instantiated with its parameters and
// compiled to search filters (Policy, Policies), and the rules of
// docs/interface.md and docs/API.md that hold whatever a policy says
// (fixed entries for project-admin types, ProjectAdmin for the /admin
// routes). The fhir service applies a Policy to every interaction, in one
// place.
package access

import (
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// Interaction is a FHIR interaction.
type Interaction string

// The interactions an access policy can name.
const (
	Read    Interaction = "read"
	VRead   Interaction = "vread"
	History Interaction = "history"
	Search  Interaction = "search"
	Create  Interaction = "create"
	Update  Interaction = "update"
	Patch   Interaction = "patch"
	Delete  Interaction = "delete"
)

// IsWrite reports whether the interaction changes data.
func (i Interaction) IsWrite() bool {
	return i == Create || i == Update || i == Patch || i == Delete
}

// protectedTypes are for super admins only.
var protectedTypes = map[string]bool{"Login": true, "JsonWebKey": true, "DomainConfiguration": true}

// adminTypes are the project-administration types: never reachable by
// non-admins, whatever their policy says.
var adminTypes = map[string]bool{"Project": true, "ProjectMembership": true, "User": true, "UserSecurityRequest": true}

// adminWritten are the types whose content decides who is an
// administrator: a client's keys and redirect URIs (whoever sets them
// signs in as the client), an access policy's limits, a bot's code and
// whom it runs as. Anyone the policy lets read them reads them; only
// admins, and members whose policy names the type itself, write them.
var adminWritten = map[string]bool{"ClientApplication": true, "AccessPolicy": true, "Bot": true}

// AdminWritten reports whether only admins, or a policy naming the type,
// may write typ.
func AdminWritten(typ string) bool { return adminWritten[typ] }

// AdminOnly is the 403 for a write of an admin-written type (or a bot's
// $deploy) by a member whose policy does not name the type.
func AdminOnly(typ string) *fhir.Error {
	return fhir.ForbiddenText("Only project administrators can change " + typ + " resources")
}

// Administrative reports whether typ is a project-administration or a
// protected type: accounts, memberships, sign-ins and keys, which no
// policy grants and no bulk operation copies.
func Administrative(typ string) bool { return adminTypes[typ] || protectedTypes[typ] }

// Check decides an interaction on a resource type by the fixed rules alone;
// nil means allowed (an access policy may still narrow it: see Policy,
// which the fhir service uses). It returns 401 for anonymous callers and
// 403 otherwise.
func Check(p *bus.Principal, typ string, i Interaction) error {
	if p == nil {
		return fhir.Unauthorized()
	}
	if p.SuperAdmin {
		return nil
	}
	if protectedTypes[typ] {
		return fhir.Forbidden()
	}
	if adminTypes[typ] {
		if !p.Admin {
			return fhir.Forbidden()
		}
		// Admins read these; membership changes go through /admin, and a
		// Project is created only by super admins. Admins update some fields
		// of their own Project (projectsettings.go, checked by the Policy).
		if i.IsWrite() && !(typ == "Project" && (i == Update || i == Patch)) {
			return fhir.Forbidden()
		}
	}
	return nil
}

// Admin allows what a project's admins do in their own project (a
// client's $rotate-secret, $resend): to them and to super admins.
func Admin(p *bus.Principal) error {
	if p == nil {
		return fhir.Unauthorized()
	}
	if !p.Admin && !p.SuperAdmin {
		return fhir.Forbidden()
	}
	return nil
}

// ProjectAdmin allows the /admin/projects/:projectId routes: to that
// project's admins and to super admins. An admin naming another project is
// refused (Medplum silently uses the caller's own project; we don't).
func ProjectAdmin(p *bus.Principal, projectID string) error {
	if err := Admin(p); err != nil || p.SuperAdmin {
		return err
	}
	if p.Project != projectID {
		return fhir.Forbidden()
	}
	return nil
}

// AdminWrite allows an /admin route or operation that writes an
// admin-written type (creating a client or a bot, rotating a client's
// secret): ProjectAdmin of projectID, or Admin when projectID is "" (the
// caller's own project). A member who is no admin is told that only
// administrators change typ, as the FHIR interactions say.
func AdminWrite(p *bus.Principal, projectID, typ string) error {
	var err error
	if projectID == "" {
		err = Admin(p)
	} else {
		err = ProjectAdmin(p, projectID)
	}
	if err != nil && p != nil && !p.Admin && !p.SuperAdmin {
		return AdminOnly(typ)
	}
	return err
}

// SuperAdmin allows what only super admins may do (creating projects).
func SuperAdmin(p *bus.Principal) error {
	if p == nil {
		return fhir.Unauthorized()
	}
	if !p.SuperAdmin {
		return fhir.Forbidden()
	}
	return nil
}
