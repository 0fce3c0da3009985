package mail

import (
	"fmt"

	"github.com/pinion-health/pinion/pkg/invite"
)

// Invitation is the e-mail of an invite that succeeded: a new user gets the
// link that sets their password; a user who has one is told where to sign
// in. Its id is the invite's, so a redelivered step queues it once.
func Invitation(rec *invite.Record, setPasswordURL, baseURL string) Message {
	req := rec.Request
	msg := Message{ID: "invite-" + rec.ID, To: req.Email, InviteID: rec.ID}
	if rec.NewUser && setPasswordURL != "" {
		msg.Subject = "Welcome to Pinion"
		msg.Text = fmt.Sprintf("Hello %s,\n\nYou were invited to %s.\n\nSet your password to sign in:\n%s\n\nThe link works once and expires in 7 days.\n",
			req.FirstName, req.ProjectName, setPasswordURL)
	} else {
		msg.Subject = "Pinion: Welcome to " + req.ProjectName
		msg.Text = fmt.Sprintf("Hello %s,\n\nYou were added to %s. You will see it the next time you sign in:\n%ssignin\n",
			req.FirstName, req.ProjectName, baseURL)
	}
	return msg
}
