package resource

// ProjectMembership is a membership Pinion creates itself: an agent's (a
// client application or bot that is its own user and profile), a member
// an admin adds, the super-admin client's.
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
}
