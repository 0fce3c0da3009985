package mail

import (
	"testing"

	"github.com/pinion-health/pinion/pkg/invite"
)

func TestInvitation(t *testing.T) {
	t.Parallel() // no server, no global
	req := invite.Request{FirstName: "Ada", ProjectName: "Clinic", Email: "ada@example.com"}
	const link = "https://app.example.com/setpassword/id/secret"
	welcome := Message{ID: "invite-inv-1", To: "ada@example.com", InviteID: "inv-1", Subject: "Welcome to Pinion",
		Text: "Hello Ada,\n\nYou were invited to Clinic.\n\nSet your password to sign in:\n" + link + "\n\nThe link works once and expires in 7 days.\n"}
	added := Message{ID: "invite-inv-1", To: "ada@example.com", InviteID: "inv-1", Subject: "Pinion: Welcome to Clinic",
		Text: "Hello Ada,\n\nYou were added to Clinic. You will see it the next time you sign in:\nhttps://app.example.com/signin\n"}
	cases := []struct {
		name    string
		newUser bool
		link    string
		want    Message
	}{
		{"new user", true, link, welcome},
		{"existing user", false, "", added},
		// The link is only for a new user; without one, say where to sign in.
		{"new user without a link", true, "", added},
		{"existing user, link ignored", false, link, added},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &invite.Record{ID: "inv-1", Request: req, NewUser: tc.newUser}
			if got := Invitation(rec, tc.link, "https://app.example.com/"); got != tc.want {
				t.Errorf("mail\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}
