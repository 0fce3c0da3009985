package resource

// User is a User Pinion creates: an invited person's or a Google
// sign-in's registration. Its password is not in it: that is a secret.
type User struct {
	ResourceType  string     `json:"resourceType"`
	FirstName     string     `json:"firstName,omitempty"`
	LastName      string     `json:"lastName,omitempty"`
	Email         string     `json:"email,omitempty"`
	EmailVerified bool       `json:"emailVerified,omitempty"`
	Project       *Reference `json:"project,omitempty"`
}

// NewUser is a User with its names and e-mail, scoped to project (its
// id; "" for a server user).
func NewUser(project, firstName, lastName, email string) *User {
	u := &User{ResourceType: "User", FirstName: firstName, LastName: lastName, Email: email}
	if project != "" {
		u.Project = &Reference{Reference: "Project/" + project}
	}
	return u
}
