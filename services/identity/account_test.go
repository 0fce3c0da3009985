package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// TestAccountBelongsToThePerson: a person's own security state changes
// only by the person, a super admin, or an admin of a project that holds
// every membership of the person (issue 52). Each row is one operation
// tried by one caller, through the route that caller has for it, and what
// it did to the person's account. "Several" is a person in two projects,
// reached through the first; "held" a person only in the admin's project.
func TestAccountBelongsToThePerson(t *testing.T) {
	ctx := context.Background()
	now := pinClock(t)

	type target struct {
		p       person
		uri     string // the enrolled authenticator's otpauth URI
		another string // a project of theirs besides p.project, if any
	}
	// fresh makes the person each row acts on: enrolled, with a passkey,
	// in one project or (several) in two.
	fresh := func(t *testing.T, several bool) *target {
		tg := &target{p: newPerson(t, "owner")}
		tg.uri, _ = tg.p.enroll(t, now)
		if _, err := live.svc.factors.UpdatePasskeys(ctx, tg.p.userID, func(rec *factors.PasskeyRecord) error {
			rec.Keys = append(rec.Keys, factors.Passkey{ID: "pk-1", Name: "laptop"})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if several {
			tg.another = newProject(t, "Another project of theirs")
			newMembership(t, tg.another, tg.p.user, newPractitioner(t, tg.another, "Own", "Er"), nil)
		}
		return tg
	}
	adminOf := func(project string) *bus.Principal {
		return &bus.Principal{User: "User/" + uuid.NewString(), Profile: "Practitioner/" + uuid.NewString(), Project: project, Admin: true}
	}
	memberOf := func(project string) *bus.Principal {
		return &bus.Principal{User: "User/" + uuid.NewString(), Profile: "Practitioner/" + uuid.NewString(), Project: project}
	}
	superAdmin := &bus.Principal{User: "User/root", Profile: "Practitioner/root", Project: newProject(t, "Super"), Admin: true, SuperAdmin: true}
	// viaProvider is the person's token from a sign-in that the identity
	// provider of another project of theirs vouched for.
	viaProvider := func(tg *target) *bus.Principal {
		pr := tg.p.principal()
		if _, err := live.conns.Sessions.UpdateLogin(ctx, pr.LoginID, func(l *session.Login) error {
			l.ProviderProject, l.AuthMethod = tg.another, signin.AuthExternal
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return pr
	}

	factorGone := func(tg *target) bool {
		rec, _, err := live.svc.factors.Load(ctx, tg.p.userID)
		if err != nil {
			t.Fatal(err)
		}
		return !rec.Enrolled
	}
	passkeyGone := func(tg *target) bool {
		n, err := live.svc.factors.PasskeyCount(ctx, tg.p.userID)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	}
	resetMFA := func(by *bus.Principal, tg *target) error {
		_, err := live.svc.factors.Reset(ctx, &bus.Request{Method: "POST", Principal: by,
			Params: map[string]string{"projectId": tg.p.project, "membershipId": tg.p.membership}})
		return err
	}
	setPasswordAs := func(by *bus.Principal, tg *target) error {
		_, err := live.svc.accounts.SuperSetPassword(ctx, signedInRequest(by, "10.40.0.1", map[string]any{"email": tg.p.email, "password": "a new long password"}))
		return err
	}
	passwordChanged := func(tg *target) bool {
		resp, err := live.svc.signins.Login(ctx, jsonRequest("10.40.0.9", map[string]any{"email": tg.p.email, "password": "a new long password"}))
		return err == nil && resp.Status == 200
	}

	cases := []struct {
		op, caller string
		several    bool // the person is in two projects
		try        func(*target) error
		changed    func(*target) bool
		allowed    bool
	}{
		// Reset factors: the person disables with a code; admins reset.
		{"reset factors", "the person", true, func(tg *target) error {
			_, err := live.svc.factors.Disable(ctx, signedInRequest(tg.p.principal(), "10.40.0.1", map[string]any{"token": codeAt(t, tg.uri, now, 1)}))
			return err
		}, factorGone, true},
		{"reset factors", "the person, through another project's provider", true, func(tg *target) error {
			_, err := live.svc.factors.Disable(ctx, signedInRequest(viaProvider(tg), "10.40.0.1", map[string]any{"token": codeAt(t, tg.uri, now, 1)}))
			return err
		}, factorGone, false},
		{"reset factors", "a super admin", true, func(tg *target) error { return resetMFA(superAdmin, tg) }, factorGone, true},
		{"reset factors", "an admin of a project holding all their memberships", false, func(tg *target) error { return resetMFA(adminOf(tg.p.project), tg) }, factorGone, true},
		{"reset factors", "an admin of one of several projects", true, func(tg *target) error { return resetMFA(adminOf(tg.p.project), tg) }, factorGone, false},
		{"reset factors", "a member", false, func(tg *target) error { return resetMFA(memberOf(tg.p.project), tg) }, factorGone, false},

		// Remove a passkey: the person's own route; admins' reset takes passkeys too.
		{"remove a passkey", "the person", true, func(tg *target) error {
			_, err := live.svc.factors.Remove(ctx, &bus.Request{Principal: tg.p.principal(), Params: map[string]string{"id": "pk-1"}})
			return err
		}, passkeyGone, true},
		{"remove a passkey", "the person, through another project's provider", true, func(tg *target) error {
			_, err := live.svc.factors.Remove(ctx, &bus.Request{Principal: viaProvider(tg), Params: map[string]string{"id": "pk-1"}})
			return err
		}, passkeyGone, false},
		{"remove a passkey", "a super admin", true, func(tg *target) error { return resetMFA(superAdmin, tg) }, passkeyGone, true},
		{"remove a passkey", "an admin of a project holding all their memberships", false, func(tg *target) error { return resetMFA(adminOf(tg.p.project), tg) }, passkeyGone, true},
		{"remove a passkey", "an admin of one of several projects", true, func(tg *target) error { return resetMFA(adminOf(tg.p.project), tg) }, passkeyGone, false},
		{"remove a passkey", "a member", false, func(tg *target) error { return resetMFA(memberOf(tg.p.project), tg) }, passkeyGone, false},

		// Add a passkey: only the person's own route exists, and it acts on
		// the caller's own account; through a project's provider, not at all.
		{"add a passkey", "the person", true, func(tg *target) error {
			return beginsFor(ctx, tg.p.principal(), tg.p.userID)
		}, nil, true},
		{"add a passkey", "the person, through another project's provider", true, func(tg *target) error {
			return beginsFor(ctx, viaProvider(tg), tg.p.userID)
		}, nil, false},
		{"add a passkey", "an admin of one of several projects", true, func(tg *target) error {
			return beginsFor(ctx, adminOf(tg.p.project), tg.p.userID)
		}, nil, false},

		// Set a password: a super admin (Medplum's /admin/super/setpassword);
		// a project's admins only give an initial password to a person
		// their invite creates; the person uses an e-mailed link.
		{"set a password", "a super admin", true, func(tg *target) error { return setPasswordAs(superAdmin, tg) }, passwordChanged, true},
		{"set a password", "an admin of a project holding all their memberships", false, func(tg *target) error { return setPasswordAs(adminOf(tg.p.project), tg) }, passwordChanged, false},
		{"set a password", "an admin of one of several projects", true, func(tg *target) error { return setPasswordAs(adminOf(tg.p.project), tg) }, passwordChanged, false},
		{"set a password", "a member", false, func(tg *target) error { return setPasswordAs(memberOf(tg.p.project), tg) }, passwordChanged, false},
		{"set a password", "an admin's invite of an existing person", true, func(tg *target) error {
			_, msg := newInvite(t, invite.Request{ProjectID: tg.p.project, FirstName: "Own", LastName: "Er", Email: tg.p.email,
				PasswordHash: mustHash(t, "a new long password")})
			return live.svc.accounts.InviteUser(ctx, msg)
		}, passwordChanged, false},

		// Change the MFA requirement: an invite's mfaRequired is its
		// project's, on its membership; the account's never changes.
		{"change the account's MFA requirement", "an admin's invite", true, func(tg *target) error {
			_, msg := newInvite(t, invite.Request{ProjectID: tg.another, FirstName: "Own", LastName: "Er", Email: tg.p.email, MFARequired: true})
			return live.svc.accounts.InviteUser(ctx, msg)
		}, func(tg *target) bool {
			rec, _, err := live.svc.factors.Load(ctx, tg.p.userID)
			if err != nil {
				t.Fatal(err)
			}
			return rec.Required
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.op+" by "+tc.caller, func(t *testing.T) {
			tg := fresh(t, tc.several)
			err := tc.try(tg)
			if tc.changed != nil {
				if got := tc.changed(tg); got != tc.allowed {
					t.Fatalf("changed %v, want %v (the call answered %v)", got, tc.allowed, err)
				}
			}
			switch {
			case tc.allowed && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.allowed && tc.changed == nil && err == nil:
				t.Fatalf("allowed")
			case !tc.allowed && err != nil && fhir.AsError(err).Status >= 500:
				t.Fatalf("refused with a server error: %v", err)
			}
		})
	}
}

// beginsFor starts a passkey registration as by and says whether it is
// for user's account: nil when it is, an error otherwise (refused, or the
// caller's own account).
func beginsFor(ctx context.Context, by *bus.Principal, user string) error {
	resp, err := live.svc.factors.RegisterBegin(ctx, &bus.Request{Method: "POST", Principal: by})
	if err != nil {
		return err
	}
	var c struct {
		PublicKey struct {
			User struct {
				ID string `json:"id"`
			} `json:"user"`
		} `json:"publicKey"`
	}
	if err := json.Unmarshal(resp.Body, &c); err != nil {
		return err
	}
	if id, _ := base64.RawURLEncoding.DecodeString(c.PublicKey.User.ID); string(id) != user {
		return fhir.ForbiddenText("a registration for another account: " + string(id))
	}
	return nil
}
