package membership

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
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
			rec := newInviteRecord("inv-1", tc.req, now)
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
	failed := func(status int, text string) *invite.Record {
		return &invite.Record{ID: "inv-1", Status: "failed", Failure: &invite.Failure{Status: status, Text: text}}
	}
	cases := []struct {
		name   string
		rec    *invite.Record
		id     string
		status int
		text   string
	}{
		{"done", &invite.Record{ID: "inv-1", Status: "done", MembershipID: "m-1", Steps: done}, "m-1", 0, ""},
		{"conflict", failed(409, "User is already a member of this project"), "", 409, "User is already a member of this project"},
		{"not found", failed(404, "Patient x"), "", 404, "Not found"},
		{"several matches", failed(412, "two"), "", 412, "Multiple resources found matching condition"},
		{"internal, cause withheld", failed(500, "mongo: connection refused"), "", 500, "Internal server error"},
		{"bad request", failed(400, "Profile does not belong to project"), "", 400, "Profile does not belong to project"},
		{"another status is a 400", failed(422, "Unprocessable"), "", 400, "Unprocessable"},
		{"still running", &invite.Record{ID: "inv-1", Status: "pending"}, "", 504, "Invite inv-1 is still in progress; it will complete"},
		{"failed without a cause", &invite.Record{ID: "inv-1", Status: "failed"}, "", 504, "Invite inv-1 is still in progress; it will complete"},
		{"membership made, step not recorded", &invite.Record{ID: "inv-1", Status: "pending", MembershipID: "m-1",
			Steps: map[string]invite.StepState{invite.StepMembership: {State: "pending"}}}, "", 504, "Invite inv-1 is still in progress; it will complete"},
		{"step done, no membership", &invite.Record{ID: "inv-1", Status: "done", Steps: done}, "", 504, "Invite inv-1 is still in progress; it will complete"},
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
			wantError(t, err, tc.status, tc.text, "")
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
