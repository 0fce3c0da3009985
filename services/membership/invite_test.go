package membership

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/testenv"
)

func TestInviteBody(t *testing.T) {
	cases := []struct {
		name, contentType, body string
		want                    map[string]any
		status                  int
		text                    string
	}{
		{"json", "application/json", `{"firstName":"Ada","admin":true}`, map[string]any{"firstName": "Ada", "admin": true}, 0, ""},
		{"fhir json with charset", "application/fhir+json; charset=utf-8", `{"firstName":"Ada"}`, map[string]any{"firstName": "Ada"}, 0, ""},
		{"form", "application/x-www-form-urlencoded", "firstName=Ada&sendEmail=false&admin=true",
			map[string]any{"firstName": "Ada", "sendEmail": "false", "admin": "true"}, 0, ""},
		{"form, first value wins", "application/x-www-form-urlencoded", "firstName=Ada&firstName=Bob", map[string]any{"firstName": "Ada"}, 0, ""},
		{"form, empty", "application/x-www-form-urlencoded", "", map[string]any{}, 0, ""},
		{"form, bad escape", "application/x-www-form-urlencoded", "firstName=%zz", nil, 400, "Content could not be parsed"},
		{"json, bad", "application/json", `{"firstName":`, nil, 400, "Content could not be parsed"},
		{"json, an array", "application/json", `[{"firstName":"Ada"}]`, nil, 400, "Content could not be parsed"},
		{"json, null", "application/json", `null`, nil, 400, "Content could not be parsed"},
		{"json, trailing data", "application/json", `{} {}`, nil, 400, "Content could not be parsed"},
		{"json, too deep", "application/json", `{"membership":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, nil, 400, "Content could not be parsed: nested too deeply"},
		{"text", "text/plain", `{}`, nil, 415, "Unsupported media type"},
		{"no type", "", `{}`, nil, 415, "Unsupported media type"},
		{"multipart", "multipart/form-data; boundary=x", "", nil, 415, "Unsupported media type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)}
			got, err := inviteBody(r)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("body %#v, want %#v", got, tc.want)
			}
		})
	}
}

// A form and a JSON body with the same fields are the same invite (the
// compat suite invites in both forms).
func TestInviteFormAndJSONAgree(t *testing.T) {
	form := &bus.Request{Header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		Body: []byte("resourceType=Patient&firstName=Pat&lastName=Form&email=pat%40example.com&sendEmail=false&admin=true")}
	js := &bus.Request{Header: map[string]string{"Content-Type": "application/json"},
		Body: []byte(`{"resourceType":"Patient","firstName":"Pat","lastName":"Form","email":"pat@example.com","sendEmail":false,"admin":true}`)}
	var drafts []*inviteDraft
	for _, r := range []*bus.Request{form, js} {
		body, err := inviteBody(r)
		if err != nil {
			t.Fatal(err)
		}
		d, issues := checkInvite(readInvite(body))
		if len(issues) > 0 {
			t.Fatal(issueLines(t, issues))
		}
		drafts = append(drafts, d)
	}
	if !reflect.DeepEqual(drafts[0], drafts[1]) {
		t.Errorf("form %+v\njson %+v", drafts[0], drafts[1])
	}
	if drafts[0].Request.SendEmail || drafts[0].Request.Membership["admin"] != true {
		t.Errorf("flags read wrong: %+v", drafts[0].Request)
	}
}

func TestNewInviteRecord(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		req   invite.Request
		email string
	}{
		{"e-mail to send", invite.Request{Email: "a@example.com", SendEmail: true}, "pending"},
		{"sendEmail false", invite.Request{Email: "a@example.com"}, "skipped"},
		{"no address", invite.Request{ExternalID: "e", SendEmail: true}, "skipped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := invite.NewRecord("inv-1", tc.req, now)
			want := &invite.Record{
				ID: "inv-1", Request: tc.req, Status: "pending", Created: now, Updated: now,
				Steps: map[string]invite.StepState{
					invite.StepUser: {State: "pending"}, invite.StepProfile: {State: "pending"},
					invite.StepMembership: {State: "pending"}, invite.StepEmail: {State: tc.email},
				},
			}
			if !reflect.DeepEqual(rec, want) {
				t.Errorf("record %+v\nwant   %+v", rec, want)
			}
		})
	}
}

func TestInviteOutcome(t *testing.T) {
	done := map[string]invite.StepState{invite.StepMembership: {State: "done"}}
	failed := func(err error) *invite.Record {
		return &invite.Record{ID: "inv-1", Status: "failed", Failure: invite.NewFailure(err)}
	}
	unprocessable := fhir.BadRequest("Unprocessable", "name")
	unprocessable.Status = 422
	cases := []struct {
		name   string
		rec    *invite.Record
		id     string
		status int
		text   string
		expr   string
	}{
		{"done", &invite.Record{ID: "inv-1", Status: "done", MembershipID: "m-1", Steps: done}, "m-1", 0, "", ""},
		{"conflict", failed(fhir.Conflict("User is already a member of this project")), "", 409, "User is already a member of this project", ""},
		{"not found", failed(fhir.NotFound()), "", 404, "Not found", ""},
		{"several matches", failed(fhir.MultipleMatches()), "", 412, "Multiple resources found matching condition", ""},
		{"internal, cause withheld", failed(errors.New("mongo: connection refused")), "", 500, "Internal server error", ""},
		{"bad request, with its field", failed(fhir.BadRequest("Profile does not belong to project", "membership.profile")), "", 400,
			"Profile does not belong to project", "membership.profile"},
		{"another status stays itself", failed(unprocessable), "", 422, "Unprocessable", "name"},
		{"a record from before outcomes were kept", &invite.Record{ID: "inv-1", Status: "failed",
			Failure: &invite.Failure{Status: 409, Text: "User is already a member of this project"}}, "", 409, "User is already a member of this project", ""},
		{"still running", &invite.Record{ID: "inv-1", Status: "pending"}, "", 504, "Invite inv-1 is still in progress; it will complete", ""},
		{"failed without a cause", &invite.Record{ID: "inv-1", Status: "failed"}, "", 504, "Invite inv-1 is still in progress; it will complete", ""},
		{"membership made, step not recorded", &invite.Record{ID: "inv-1", Status: "pending", MembershipID: "m-1",
			Steps: map[string]invite.StepState{invite.StepMembership: {State: "pending"}}}, "", 504, "Invite inv-1 is still in progress; it will complete", ""},
		{"step done, no membership", &invite.Record{ID: "inv-1", Status: "done", Steps: done}, "", 504, "Invite inv-1 is still in progress; it will complete", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := inviteOutcome(tc.rec)
			if tc.status == 0 {
				if err != nil || id != tc.id {
					t.Fatalf("inviteOutcome = %q, %v; want %q", id, err, tc.id)
				}
				return
			}
			if id != "" {
				t.Errorf("membership %q with an error", id)
			}
			wantError(t, err, tc.status, tc.text, tc.expr)
		})
	}
}

// A 504 names the invite, so the caller can look it up later.
func TestInviteOutcomeNamesTheInvite(t *testing.T) {
	_, err := inviteOutcome(&invite.Record{ID: "inv-7", Status: "pending"})
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want a *fhir.Error", err)
	}
	if got := string(fe.JSON()); !strings.Contains(got, `"diagnostics":"invite/inv-7"`) {
		t.Errorf("outcome %s lacks the invite's id", got)
	}
}

func TestInviteWaitFor(t *testing.T) {
	if got := inviteWaitFor(context.Background()); got != inviteWait {
		t.Errorf("no deadline: %v, want %v", got, inviteWait)
	}
	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if got := inviteWaitFor(far); got != inviteWait {
		t.Errorf("far deadline: %v, want %v", got, inviteWait)
	}
	near, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := inviteWaitFor(near); got > 4*time.Second || got < 3*time.Second {
		t.Errorf("deadline in 5s: %v, want just under 4s", got)
	}
	past, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	if got := inviteWaitFor(past); got > 0 {
		t.Errorf("deadline passed: %v, want no wait", got)
	}
}

// invitee is a new e-mail address for one test's invitee.
func invitee(what string) string { return what + "-" + uuid.NewString()[:8] + "@example.com" }

// inviteJSON is an invite body: a practitioner with this e-mail, the fields given.
func inviteJSON(t *testing.T, email string, fields map[string]any) string {
	t.Helper()
	m := map[string]any{"resourceType": "Practitioner", "firstName": "Grace", "lastName": "Hopper", "email": email}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ref(r string) map[string]any { return map[string]any{"reference": r} }

// Invites that the project's data refuses are refused before the saga
// starts: nothing is recorded, and no step runs.
func TestInviteRefusedBeforeTheSaga(t *testing.T) {
	project, other := fixtureProject(t, nil), fixtureProject(t, nil)
	missing := uuid.NewString()
	foreignPolicy, foreignProfile := fixturePolicy(t, other), fixturePractitioner(t, other)
	foreignPatient := fixture(t, other, map[string]any{"resourceType": "Patient"})
	patient := fixture(t, project, map[string]any{"resourceType": "Patient"})
	noPolicy := "AccessPolicy/" + uuid.NewString()
	cases := []struct {
		name        string
		by          *bus.Principal
		project     string
		contentType string
		fields      map[string]any
		status      int
		text, expr  string
	}{
		{"anonymous", nil, project, "application/json", nil, 401, "Unauthorized", ""},
		{"a member, not an admin", memberOf(project), project, "application/json", nil, 403, "Forbidden", ""},
		{"another project's admin", adminOf(other), project, "application/json", nil, 403, "Forbidden", ""},
		{"not JSON or a form", adminOf(project), project, "text/plain", nil, 415, "Unsupported media type", ""},
		{"no such project", adminOf(missing), missing, "application/json", nil, 404, "Not found", ""},
		{"no such project, for a super admin", superAdmin(), missing, "application/json", nil, 404, "Not found", ""},
		{"a field refused by itself", adminOf(project), project, "application/json", map[string]any{"lastName": " "}, 400, "Last name is required", "lastName"},
		{"a patient of another project", adminOf(project), project, "application/json",
			map[string]any{"resourceType": "RelatedPerson", "patient": ref(foreignPatient), "accessPolicy": ref(foreignPolicy)},
			400, "Patient " + foreignPatient + " does not exist in this project", "patient"},
		{"a new related person without a patient", adminOf(project), project, "application/json",
			map[string]any{"resourceType": "RelatedPerson"}, 400, "patient is required to invite a RelatedPerson", "patient"},
		{"a policy of another project", adminOf(project), project, "application/json",
			map[string]any{"membership": map[string]any{"accessPolicy": ref(foreignPolicy), "profile": ref(foreignProfile)}},
			400, "Access policy " + foreignPolicy + " does not belong to this project", "membership.accessPolicy"},
		{"no such policy", adminOf(project), project, "application/json",
			map[string]any{"access": []any{map[string]any{"policy": ref(noPolicy)}}},
			400, "Access policy " + noPolicy + " does not exist", "membership.access[0].policy"},
		{"a profile of another project", adminOf(project), project, "application/json",
			map[string]any{"membership": map[string]any{"profile": ref(foreignProfile)}}, 400, "Profile does not belong to project", "membership.profile"},
		{"a profile of another type", adminOf(project), project, "application/json",
			map[string]any{"membership": map[string]any{"profile": ref(patient)}}, 400, "Profile resourceType does not match request", "membership.profile"},
		{"no such profile", adminOf(project), project, "application/json",
			map[string]any{"membership": map[string]any{"profile": ref("Practitioner/" + uuid.NewString())}}, 404, "Not found", ""},
		{"a profile that is no reference", adminOf(project), project, "application/json",
			map[string]any{"membership": map[string]any{"profile": "Practitioner/x"}}, 400, "Invalid profile reference", "membership.profile"},
		// An admin's choice of password meets the rule a person's own does.
		{"a breached password", adminOf(project), project, "application/json",
			map[string]any{"password": "password1"}, 400, "Password found in breach database", "password"},
	}
	var emails []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			email := invitee("refused")
			emails = append(emails, email)
			stack.steps.script(email, stepScript{UserID: uuid.NewString()})
			r := request(tc.by, map[string]string{"projectId": tc.project}, tc.contentType, inviteJSON(t, email, tc.fields))
			resp, err := call(t, stack.svc.invite, r)
			wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
		})
	}
	// Nothing was recorded (the record is written before the first step),
	// where an invite that passes is.
	accepted := invitee("accepted")
	stack.steps.script(accepted, stepScript{UserID: uuid.NewString()})
	mustCall(t, stack.svc.invite, fhirJSON(adminOf(project), map[string]string{"projectId": project}, inviteJSON(t, accepted, map[string]any{"sendEmail": false})), 200)
	refused := map[string]bool{}
	for _, e := range emails {
		refused[e] = true
	}
	recorded := false
	for _, rec := range inviteRecords(t) {
		recorded = recorded || rec.Request.Email == accepted
		if refused[rec.Request.Email] {
			t.Errorf("refused invite of %s recorded as %s", rec.Request.Email, rec.ID)
		}
	}
	if !recorded {
		t.Errorf("the accepted invite is not among the records")
	}
	if ms := membersOf(t, project); len(ms) != 1 {
		t.Errorf("memberships %v, want the accepted invite's", ms)
	}
}

// inviteRecords are every invite recorded so far.
func inviteRecords(t *testing.T) []*invite.Record {
	t.Helper()
	ctx := testCtx(t)
	kv, err := stack.js.KeyValue(ctx, invite.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*invite.Record
	for id := range keys.Keys() {
		rec, err := stack.invites.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// Several field issues are reported together, one per field.
func TestInviteReportsEveryField(t *testing.T) {
	project := fixtureProject(t, nil)
	_, err := call(t, stack.svc.invite, fhirJSON(adminOf(project), map[string]string{"projectId": project},
		`{"resourceType":"Device","lastName":"X","sendEmail":"maybe","color":"red"}`))
	var fe *fhir.Error
	if !errors.As(err, &fe) || fe.Status != 400 {
		t.Fatalf("%v, want 400", err)
	}
	wantLines(t, issueLines(t, fe.Outcome.Issue), []string{
		"color: Unknown field: color", "resourceType: Resource type is required", "firstName: First name is required",
		"email: Either email or externalId is required", "sendEmail: sendEmail must be a boolean",
	})
}

func TestInvite(t *testing.T) {
	project := fixtureProject(t, map[string]any{"name": "Harbor Clinic"})
	params := map[string]string{"projectId": project}
	by := adminOf(project)
	by.Profile = fixture(t, project, map[string]any{"resourceType": "Practitioner",
		"name": []any{map[string]any{"given": []any{"Katherine"}, "family": "Johnson"}}})
	policy := fixturePolicy(t, project)
	send := func(t *testing.T, body string) (*bus.Response, error) {
		t.Helper()
		return call(t, stack.svc.invite, fhirJSON(by, params, body))
	}

	email := invitee("grace")
	user := uuid.NewString()
	var first map[string]any
	t.Run("a new user", func(t *testing.T) {
		stack.steps.script(email, stepScript{UserID: user, NewUser: true, SetPasswordURL: "https://app.example/setpassword/abc/def"})
		first = mustCall(t, stack.svc.invite, fhirJSON(by, params, inviteJSON(t, "  "+strings.ToUpper(email), map[string]any{
			"password": "long enough", "membership": map[string]any{"admin": true, "accessPolicy": ref(policy)},
		})), 200)
		profile, _ := refOf(first["profile"])
		want := map[string]any{
			"resourceType": "ProjectMembership", "id": first["id"], "meta": first["meta"], "admin": true, "accessPolicy": ref(policy),
			"project": map[string]any{"reference": "Project/" + project, "display": "Harbor Clinic"},
			"user":    map[string]any{"reference": "User/" + user, "display": email},
			"profile": map[string]any{"reference": profile, "display": "Grace Hopper"},
			// Named as Medplum's app shows it on the membership page.
			"invitedBy": map[string]any{"reference": by.User, "display": "Katherine Johnson"},
		}
		if !reflect.DeepEqual(normalize(first), normalize(want)) {
			t.Errorf("membership %v\nwant %v", first, want)
		}
		if e := sessionEntry(t, first["id"].(string)); e == nil || !e.Admin || !e.AccessPolicy || !e.Active || e.User != "User/"+user {
			t.Errorf("session entry %+v", e)
		}
		id := stack.steps.lastInvite(t, email)
		rec := waitInvite(t, id, func(r *invite.Record) bool { return r.Steps[invite.StepEmail].State == "done" })
		if rec.Status != "done" || rec.MembershipID != first["id"] || rec.Steps[invite.StepMembership].State != "done" {
			t.Errorf("record %+v", rec)
		}
		req := rec.Request
		if req.ProjectName != "Harbor Clinic" || req.InvitedBy != by.User || req.ProjectScoped ||
			req.PasswordHash == "" || strings.Contains(req.PasswordHash, "long enough") {
			t.Errorf("request %+v", req)
		}
		eml := readMail(t, "invite-"+id)
		for _, want := range []string{"Subject: Welcome to Pinion", "To: <" + email + ">", "You were invited to Harbor Clinic.", "https://app.example/setpassword/abc/def"} {
			if !strings.Contains(eml, want) {
				t.Errorf("e-mail lacks %q:\n%s", want, eml)
			}
		}
	})
	if first == nil {
		t.FailNow()
	}

	t.Run("the same person again", func(t *testing.T) {
		resp, err := send(t, inviteJSON(t, email, nil))
		wantFHIRError(t, resp, err, 409, "User is already a member of this project", "")
		rec, _ := stack.invites.Get(testCtx(t), stack.steps.lastInvite(t, email))
		if rec.Status != "failed" || rec.Failure == nil || rec.Failure.Status != 409 || rec.Steps[invite.StepMembership].State != "failed" {
			t.Errorf("record %+v", rec)
		}
		if ms := membersOf(t, project)["User/"+user]; len(ms) != 1 {
			t.Errorf("%d memberships of the user", len(ms))
		}
	})

	t.Run("upsert applies the template to the membership", func(t *testing.T) {
		profile, _ := refOf(first["profile"])
		stack.steps.script(email, stepScript{UserID: user, Profile: profile})
		m := mustCall(t, stack.svc.invite, fhirJSON(by, params, inviteJSON(t, email, map[string]any{"upsert": true, "sendEmail": false, "admin": false})), 200)
		if m["id"] != first["id"] || m["admin"] != false {
			t.Errorf("membership %v, want %s made no admin", m, first["id"])
		}
		if e := sessionEntry(t, first["id"].(string)); e == nil || e.Admin {
			t.Errorf("session entry %+v", e)
		}
	})

	t.Run("upsert with another profile", func(t *testing.T) {
		stack.steps.script(email, stepScript{UserID: user, Profile: fixturePractitioner(t, project)})
		resp, err := send(t, inviteJSON(t, email, map[string]any{"upsert": true}))
		wantFHIRError(t, resp, err, 409, "User is already a member of this project with a different profile", "")
	})

	t.Run("forceNewMembership adds one", func(t *testing.T) {
		m := mustCall(t, stack.svc.invite, fhirJSON(by, params, inviteJSON(t, email, map[string]any{"forceNewMembership": true, "sendEmail": false})), 200)
		if m["id"] == first["id"] {
			t.Errorf("the same membership, want a new one")
		}
		if ms := membersOf(t, project)["User/"+user]; len(ms) != 2 {
			t.Errorf("%d memberships of the user, want 2", len(ms))
		}
	})

	t.Run("an externalId taken", func(t *testing.T) {
		fixtureMember(t, project, "User/"+uuid.NewString(), fixturePractitioner(t, project), map[string]any{"externalId": "ext-taken"})
		other := uuid.NewString()
		stack.steps.script("ext-taken", stepScript{UserID: other})
		resp, err := send(t, `{"resourceType":"Patient","firstName":"Ext","lastName":"Ernal","externalId":"ext-taken"}`)
		wantFHIRError(t, resp, err, 409, "Membership with externalId ext-taken already exists", "")
		// The user's claim on a membership is let go again.
		if owner, _ := stack.repo.ClaimOwner(testCtx(t), repo.MembershipKey(project, "User/"+other)); owner != "" {
			t.Errorf("membership claim held by %q", owner)
		}
	})

	t.Run("a project user with the e-mail is already the member", func(t *testing.T) {
		same := invitee("scoped")
		scoped := fixtureUser(t, project, same)
		fixtureMember(t, project, "User/"+scoped, fixturePractitioner(t, project), nil)
		stack.steps.script(same, stepScript{UserID: uuid.NewString(), NewUser: true})
		resp, err := send(t, inviteJSON(t, same, map[string]any{"sendEmail": false}))
		wantFHIRError(t, resp, err, 409, "User is already a member of this project", "")
	})

	t.Run("an existing user by form, told where to sign in", func(t *testing.T) {
		known := invitee("known")
		existing := uuid.NewString()
		stack.steps.script(known, stepScript{UserID: existing})
		r := request(by, params, "application/x-www-form-urlencoded",
			"resourceType=Patient&firstName=Pat&lastName=Ient&scope=project&email="+url.QueryEscape(known))
		m := mustCall(t, stack.svc.invite, r, 200)
		if u, _ := refOf(m["user"]); u != "User/"+existing || m["admin"] != false {
			t.Errorf("membership %v", m)
		}
		id := stack.steps.lastInvite(t, known)
		rec := waitInvite(t, id, func(r *invite.Record) bool { return r.Steps[invite.StepEmail].State == "done" })
		if !rec.Request.ProjectScoped || rec.Request.Membership["admin"] != false {
			t.Errorf("request %+v", rec.Request)
		}
		eml := readMail(t, "invite-"+id)
		for _, want := range []string{"Subject: Pinion: Welcome to Harbor Clinic", "You were added to Harbor Clinic.", testBaseURL + "signin"} {
			if !strings.Contains(eml, want) {
				t.Errorf("e-mail lacks %q:\n%s", want, eml)
			}
		}
	})

	t.Run("no e-mail when told not to", func(t *testing.T) {
		quiet := invitee("quiet")
		stack.steps.script(quiet, stepScript{UserID: uuid.NewString(), NewUser: true, SetPasswordURL: "https://app.example/x"})
		mustCall(t, stack.svc.invite, fhirJSON(by, params, inviteJSON(t, quiet, map[string]any{"sendEmail": false})), 200)
		id := stack.steps.lastInvite(t, quiet)
		if rec, _ := stack.invites.Get(testCtx(t), id); rec.Steps[invite.StepEmail].State != "skipped" {
			t.Errorf("e-mail step %+v", rec.Steps[invite.StepEmail])
		}
		if _, err := os.Stat(filepath.Join(stack.mailDir, "invite-"+id+".eml")); !os.IsNotExist(err) {
			t.Errorf("an e-mail was written: %v", err)
		}
	})

	t.Run("a profile named in the membership", func(t *testing.T) {
		named := invitee("named")
		profile := fixturePractitioner(t, project)
		stack.steps.script(named, stepScript{UserID: uuid.NewString()})
		m := mustCall(t, stack.svc.invite, fhirJSON(by, params,
			inviteJSON(t, named, map[string]any{"sendEmail": false, "membership": map[string]any{"profile": ref(profile)}})), 200)
		if p, _ := refOf(m["profile"]); p != profile {
			t.Errorf("profile %q, want %q", p, profile)
		}
		if rec, _ := stack.invites.Get(testCtx(t), stack.steps.lastInvite(t, named)); rec.Request.Profile != profile || rec.Request.Membership["profile"] != nil {
			t.Errorf("request %+v: want the profile checked and taken out of the template", rec.Request)
		}
	})

	t.Run("a related person the project has", func(t *testing.T) {
		aunt := invitee("aunt")
		kid := fixture(t, project, map[string]any{"resourceType": "Patient"})
		rp := fixture(t, project, map[string]any{"resourceType": "RelatedPerson", "patient": ref(kid),
			"telecom": []any{map[string]any{"system": "email", "value": aunt}}})
		stack.steps.script(aunt, stepScript{UserID: uuid.NewString()})
		m := mustCall(t, stack.svc.invite, fhirJSON(by, params,
			`{"resourceType":"RelatedPerson","firstName":"Aunt","lastName":"Ie","sendEmail":false,"email":"`+aunt+`"}`), 200)
		if p, _ := refOf(m["profile"]); p != rp {
			t.Errorf("profile %q, want %q", p, rp)
		}
	})

	t.Run("a step's failure is the answer", func(t *testing.T) {
		// A status the membership service never makes itself: the step's
		// answer, not a 400.
		unprocessable := fhir.BadRequest("E-mail domain not accepted", "email")
		unprocessable.Status = 422
		for _, tc := range []struct {
			err        error
			status     int
			text, expr string
		}{
			{fhir.BadRequest("Invalid e-mail domain", "email"), 400, "Invalid e-mail domain", "email"},
			{fhir.Conflict("Too late"), 409, "Too late", ""},
			{fhir.NotFound(), 404, "Not found", ""},
			{unprocessable, 422, "E-mail domain not accepted", "email"},
			{fhir.Busy("Too busy"), 503, "Too busy", ""},
			{errors.New("disk full"), 500, "Internal server error", ""},
		} {
			failing := invitee("failing")
			stack.steps.script(failing, stepScript{Err: tc.err})
			resp, err := send(t, inviteJSON(t, failing, nil))
			wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
			var fe *fhir.Error
			if errors.As(err, &fe) && !reflect.DeepEqual(fe.Header, fhir.AsError(tc.err).Header) {
				t.Errorf("%s: headers %v, want the step's %v", tc.text, fe.Header, fhir.AsError(tc.err).Header)
			}
		}
	})

	t.Run("a saga still running", func(t *testing.T) {
		slow := invitee("slow")
		stack.steps.script(slow, stepScript{Hold: true})
		// Wait 200 ms of the caller's deadline, keeping a second to answer.
		ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
		defer cancel()
		resp, err := stack.svc.invite(ctx, fhirJSON(by, params, inviteJSON(t, slow, nil)))
		var fe *fhir.Error
		if !errors.As(err, &fe) {
			t.Fatalf("%v %v, want 504", resp, err)
		}
		id, ok := strings.CutPrefix(fe.Outcome.Issue[0].Diagnostics, "invite/")
		if !ok {
			t.Fatalf("diagnostics %q", fe.Outcome.Issue[0].Diagnostics)
		}
		wantError(t, err, 504, "Invite "+id+" is still in progress; it will complete", "")
		if rec, err := stack.invites.Get(testCtx(t), id); err != nil || rec.Status != "pending" || rec.Request.Email != slow {
			t.Errorf("record %+v %v", rec, err)
		}
	})
}

// readMail reads the .eml file of a message id.
func readMail(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stack.mailDir, id+".eml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An invite whose first step cannot be published (its stream is gone, as
// when the NATS server holding it is lost) is tried again for a while,
// then answered 503 with its record failed, not left pending for ever.
func TestInviteThatCannotStart(t *testing.T) {
	js := testenv.New(t).JS // a NATS server of its own: the shared stack keeps its stream
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	invites, err := invite.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, saga.Stream); err != nil {
		t.Fatal(err)
	}
	s := &Service{invites: invites, log: stack.svc.log}
	rec := invite.NewRecord(uuid.NewString(), invite.Request{Email: invitee("unstarted")}, time.Now().UTC())
	t0 := time.Now()
	err = s.startInvite(ctx, rec)
	wantError(t, err, 503, "The invite could not be started; try again", "")
	if d := time.Since(t0); d < time.Second || d > 3*time.Second {
		t.Errorf("gave up after %v: want the request's time less a second, about 2s", d)
	}
	got, err := invites.Get(context.Background(), rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "failed" || got.Failure == nil || got.Failure.Status != 503 {
		t.Fatalf("record %+v, want failed with 503", got)
	}
	if _, err := inviteOutcome(got); !errors.As(err, new(*fhir.Error)) || err.(*fhir.Error).Status != 503 {
		t.Errorf("outcome of the failed record: %v, want 503", err)
	}
}

func TestProfileName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile map[string]any
		want    string
	}{
		{"a person", map[string]any{"name": []any{map[string]any{"given": []any{"Mary", "Jane"}, "family": "Jackson"}}}, "Mary Jane Jackson"},
		{"a person's text", map[string]any{"name": []any{map[string]any{"text": "Dr. Vaughan", "family": "Vaughan"}}}, "Dr. Vaughan"},
		{"a client", map[string]any{"resourceType": "ClientApplication", "name": "Front desk"}, "Front desk"},
		{"no name", map[string]any{"resourceType": "Practitioner"}, ""},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := profileName(tc.profile); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
