package resource

import "encoding/json"

// ProjectMembership is a membership Pinion creates itself: an agent's (a
// client application or bot that is its own user and profile), a member
// an admin adds, the super-admin client's, an invited person's.
type ProjectMembership struct {
	ResourceType string    `json:"resourceType"`
	Project      Reference `json:"project"`
	User         Reference `json:"user"`
	Profile      Reference `json:"profile"`
	// Admin is written only when set: an agent's says false explicitly, a
	// member's only when true, as each was before it was typed.
	Admin        *bool      `json:"admin,omitempty"`
	AccessPolicy *Reference `json:"accessPolicy,omitempty"`
	InvitedBy    *Reference `json:"invitedBy,omitempty"`
	// Other holds an invite's template (admin, access, externalId, ...) as
	// the inviter gave it: written beside the fields above, which win
	// over a template element of the same name when they are set. It is
	// only written; Pinion never reads a membership back into this type.
	Other map[string]json.RawMessage `json:"-"`
}

// projectMembershipFields is ProjectMembership without its methods.
type projectMembershipFields ProjectMembership

// MarshalJSON writes the membership's fields and its template's.
func (m ProjectMembership) MarshalJSON() ([]byte, error) {
	return marshalWith(projectMembershipFields(m), m.Other)
}
