package writerules

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// fakeEnv is an Env over a few stored resources ("Type/id"), a project the
// write lands in, and a writer whose policy hides the search parameter
// hidden.
type fakeEnv struct {
	stored  map[string]*repo.Resource
	project string
	hidden  string
}

func (e fakeEnv) Read(_ context.Context, sc repo.Scope, typ, id string) (*repo.Resource, error) {
	if !sc.AllProjects {
		return nil, errors.New("rules read across projects")
	}
	if r, ok := e.stored[typ+"/"+id]; ok {
		return r, nil
	}
	return nil, fhir.NotFound()
}

func (e fakeEnv) Project(context.Context, map[string]any) (string, error) { return e.project, nil }

func (e fakeEnv) CheckSearch(typ string, q *search.Query) error {
	if _, ok := q.Canonical[e.hidden]; ok {
		return fhir.BadRequest("Search parameter "+e.hidden+" reads a field your access policy hides", e.hidden)
	}
	return nil
}

// env is the world the examples are written in: project p1 runs bots on
// a schedule, p2 runs bots but not on one; policy pol1 is p1's, pol2 p2's;
// the writer may not search Patient by birthdate.
func env(project string) fakeEnv {
	stored := map[string]*repo.Resource{
		"Project/p1":      {Type: "Project", ID: "p1", Project: "p1", JSON: []byte(`{"resourceType":"Project","features":["bots","cron"]}`)},
		"Project/p2":      {Type: "Project", ID: "p2", Project: "p2", JSON: []byte(`{"resourceType":"Project","features":["bots"]}`)},
		"AccessPolicy/a1": {Type: "AccessPolicy", ID: "a1", Project: "p1", JSON: []byte(`{"resourceType":"AccessPolicy"}`)},
		"AccessPolicy/a2": {Type: "AccessPolicy", ID: "a2", Project: "p2", JSON: []byte(`{"resourceType":"AccessPolicy"}`)},
	}
	return fakeEnv{stored: stored, project: project, hidden: "birthdate"}
}

// example is one resource written: accepted when status is 0, else
// refused with that status, a message containing text and, when expr is
// set, that expression.
type example struct {
	name    string
	project string // where it lands ("p1" unless set)
	res     map[string]any
	status  int
	text    string
	expr    string
}

func newSubscription(criteria string, channel map[string]any) map[string]any {
	return map[string]any{"resourceType": "Subscription", "status": "active", "criteria": criteria, "channel": channel}
}

func policy(entries ...map[string]any) map[string]any {
	list := make([]any, len(entries))
	for i, e := range entries {
		list[i] = e
	}
	return map[string]any{"resourceType": "AccessPolicy", "name": "p", "resource": list}
}

func ref(s string) map[string]any { return map[string]any{"reference": s} }

// checkedBefore are examples of Check, by type: each type in rules has
// accepted and refused ones.
var checkedBefore = map[string][]example{
	"ClientApplication": {
		{name: "no URIs", res: map[string]any{"resourceType": "ClientApplication", "name": "c"}},
		{name: "https and loopback URIs", res: map[string]any{"resourceType": "ClientApplication",
			"redirectUri": "https://app.example/cb", "redirectUris": []any{"http://127.0.0.1:8080/cb", "com.example.app:/cb"}, "launchUri": "https://app.example/launch"}},
		{name: "a blank secret is no secret", res: map[string]any{"resourceType": "ClientApplication", "secret": ""}},
		{name: "a secret", res: map[string]any{"resourceType": "ClientApplication", "secret": "s"},
			status: 400, text: "ClientApplication.secret is set by the server: use $rotate-secret", expr: "secret"},
		{name: "a retiring secret", res: map[string]any{"resourceType": "ClientApplication", "retiringSecret": "s"},
			status: 400, text: "ClientApplication.retiringSecret is set by the server", expr: "retiringSecret"},
		{name: "a javascript redirect URI", res: map[string]any{"resourceType": "ClientApplication", "redirectUri": "javascript:alert(1)"},
			status: 400, text: "Invalid redirect URI", expr: "redirectUri"},
		{name: "a bad redirect URI in the list", res: map[string]any{"resourceType": "ClientApplication", "redirectUris": []any{"https://a.example/", "ftp://b.example/"}},
			status: 400, text: "Invalid redirect URI", expr: "redirectUris[1]"},
		{name: "an http launch URI", res: map[string]any{"resourceType": "ClientApplication", "launchUri": "http://app.example/launch"},
			status: 400, text: "Invalid launch URI", expr: "launchUri"},
		{name: "the secret is refused before the URIs", res: map[string]any{"resourceType": "ClientApplication", "secret": "s", "redirectUri": "/cb"},
			status: 400, text: "is set by the server", expr: "secret"},
	},
	"AccessPolicy": {
		{name: "no criteria", res: policy(map[string]any{"resourceType": "Patient"})},
		{name: "criteria with variables", res: policy(
			map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"},
			map[string]any{"resourceType": "Observation", "criteria": "Observation?subject=%patient&code:text=x"})},
		{name: "a chained parameter", res: policy(map[string]any{"resourceType": "Observation", "criteria": "Observation?subject.name=x"})},
		{name: "blank criteria", res: policy(map[string]any{"resourceType": "Patient", "criteria": ""})},
		{name: "no resource type", res: policy(map[string]any{"resourceType": "Patient", "criteria": "?name=x"}),
			status: 400, text: "Invalid criteria: criteria", expr: "AccessPolicy.resource[0].criteria"},
		{name: "a bad escape", res: policy(map[string]any{"resourceType": "Patient"}, map[string]any{"resourceType": "Patient", "criteria": "Patient?name=100%"}),
			status: 400, text: "invalid escape", expr: "AccessPolicy.resource[1].criteria"},
		{name: "another type", res: policy(map[string]any{"resourceType": "Patient", "criteria": "Observation?code=x"}),
			status: 400, text: "Criteria must search Patient, the entry's resource type, not Observation", expr: "AccessPolicy.resource[0].criteria"},
		{name: "an unknown parameter", res: policy(map[string]any{"resourceType": "Patient", "criteria": "Patient?colour=blue"}),
			status: 400, text: "Unknown search parameter in criteria: colour", expr: "AccessPolicy.resource[0].criteria"},
	},
	"Subscription": {
		{name: "a rest-hook to a bot", res: newSubscription("Patient", map[string]any{"type": "rest-hook", "endpoint": "Bot/b1"})},
		{name: "a websocket", res: newSubscription("Observation?code=http://loinc.org|1234-5", map[string]any{"type": "websocket"})},
		{name: "criteria on a field the writer sees", res: newSubscription("Patient?name=x", map[string]any{"type": "websocket"})},
		{name: "no criteria", res: newSubscription("", map[string]any{"type": "websocket"}),
			status: 400, text: "Subscription criteria are required", expr: "Subscription.criteria"},
		{name: "an ftp endpoint", res: newSubscription("Patient", map[string]any{"type": "rest-hook", "endpoint": "ftp://x/y"}),
			status: 400, text: "http(s) URL", expr: "Subscription.channel.endpoint"},
		{name: "an e-mail channel", res: newSubscription("Patient", map[string]any{"type": "email", "endpoint": "x"}),
			status: 400, text: "Supported channel types are rest-hook and websocket", expr: "Subscription.channel.type"},
		{name: "criteria on a hidden field", res: newSubscription("Patient?birthdate=2000-01-01", map[string]any{"type": "websocket"}),
			status: 400, text: "Invalid criteria: Search parameter birthdate reads a field your access policy hides", expr: "Subscription.criteria"},
	},
	"Bot": {
		{name: "no schedule", project: "p2", res: map[string]any{"resourceType": "Bot", "name": "b"}},
		{name: "a schedule in a cron project", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": "CRON_TZ=Europe/Paris 0 9 * * 1-5"}},
		{name: "a timing in a cron project", res: map[string]any{"resourceType": "Bot", "name": "b",
			"cronTiming": map[string]any{"repeat": map[string]any{"period": 48.0, "dayOfWeek": []any{"mon"}}}}},
		{name: "a blank schedule is none", project: "p2", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": ""}},
		{name: "a bad minute", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": "61 * * * *"},
			status: 400, text: "Bot.cronString", expr: "cronString"},
		{name: "a timing without repeat", res: map[string]any{"resourceType": "Bot", "name": "b", "cronTiming": map[string]any{"code": map[string]any{"text": "daily"}}},
			status: 400, text: "Bot.cronTiming.repeat is required", expr: "cronTiming.repeat"},
		{name: "a schedule without the cron feature", project: "p2", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": "*/5 * * * *"},
			status: 400, text: "need the project's features to include cron and bots", expr: "cronString"},
		{name: "a schedule in no project", project: "none", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": "*/5 * * * *"},
			status: 400, text: "need the project's features", expr: "cronString"},
		{name: "a bad schedule is refused before the features are read", project: "p2", res: map[string]any{"resourceType": "Bot", "name": "b", "cronString": "every day"},
			status: 400, text: "five fields", expr: "cronString"},
	},
	// A type without rules takes what its definition takes.
	"Patient": {
		{name: "anything", res: map[string]any{"resourceType": "Patient", "secret": "s", "criteria": "?"}},
	},
}

// checkedAfter are examples of CheckAfterAccess, by type.
var checkedAfter = map[string][]example{
	"Project": {
		{name: "no patient policy", res: map[string]any{"resourceType": "Project", "id": "p1", "name": "P"}},
		{name: "its own policy", res: map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": ref("AccessPolicy/a1")}},
		{name: "another project's policy", res: map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": ref("AccessPolicy/a2")},
			status: 400, text: "Access policy AccessPolicy/a2 does not belong to this project", expr: "defaultPatientAccessPolicy"},
		{name: "a policy that does not exist", res: map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": ref("AccessPolicy/nope")},
			status: 400, text: "Access policy AccessPolicy/nope does not belong to this project", expr: "defaultPatientAccessPolicy"},
		{name: "not an access policy", res: map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": ref("Patient/a1")},
			status: 400, text: "Invalid access policy reference", expr: "defaultPatientAccessPolicy"},
		{name: "not a reference", res: map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": "AccessPolicy/a1"},
			status: 400, text: "Invalid access policy reference", expr: "defaultPatientAccessPolicy"},
	},
	"Patient": {
		{name: "anything", res: map[string]any{"resourceType": "Patient", "defaultPatientAccessPolicy": "x"}},
	},
}

func TestRules(t *testing.T) {
	run := func(t *testing.T, check func(context.Context, string, map[string]any, Env) error, examples map[string][]example) {
		for typ, list := range examples {
			for _, ex := range list {
				t.Run(typ+"/"+ex.name, func(t *testing.T) {
					project := ex.project
					if project == "" {
						project = "p1"
					}
					err := check(context.Background(), typ, ex.res, env(project))
					if ex.status == 0 {
						if err != nil {
							t.Fatalf("refused: %v", err)
						}
						return
					}
					var fe *fhir.Error
					if !errors.As(err, &fe) || fe.Status != ex.status || !strings.Contains(fe.Message(), ex.text) {
						t.Fatalf("%v, want %d saying %q", err, ex.status, ex.text)
					}
					if got := fe.Outcome.Issue[0].Expression; ex.expr != "" && !slices.Equal(got, []string{ex.expr}) {
						t.Fatalf("expression %v, want %q", got, ex.expr)
					}
				})
			}
		}
	}
	t.Run("before access", func(t *testing.T) { run(t, Check, checkedBefore) })
	t.Run("after access", func(t *testing.T) { run(t, CheckAfterAccess, checkedAfter) })
}

// Every type with rules has examples of what they accept and refuse: a
// rule added to the table without any fails here.
func TestEveryRuleHasExamples(t *testing.T) {
	for _, tables := range []struct {
		name     string
		rules    map[string][]Rule
		examples map[string][]example
	}{{"rules", rules, checkedBefore}, {"afterAccess", afterAccess, checkedAfter}} {
		for typ := range tables.rules {
			accepted, refused := false, false
			for _, ex := range tables.examples[typ] {
				accepted = accepted || ex.status == 0
				refused = refused || ex.status != 0
			}
			if !accepted || !refused {
				t.Errorf("%s[%q]: want examples both accepted and refused", tables.name, typ)
			}
		}
	}
}

// The rules before access are not asked after it, nor the other way round.
func TestPhasesApart(t *testing.T) {
	ctx := context.Background()
	if err := CheckAfterAccess(ctx, "ClientApplication", map[string]any{"resourceType": "ClientApplication", "secret": "s"}, env("p1")); err != nil {
		t.Errorf("CheckAfterAccess ran a content rule: %v", err)
	}
	if err := Check(ctx, "Project", map[string]any{"resourceType": "Project", "id": "p1", "defaultPatientAccessPolicy": ref("AccessPolicy/a2")}, env("p1")); err != nil {
		t.Errorf("Check ran a rule kept until after access: %v", err)
	}
}

// Forms send the fields left blank as "": Check reads them as absent, as
// the write that follows stores them, and drops them from the resource.
func TestCheckDropsBlankFields(t *testing.T) {
	cases := []struct {
		name, typ string
		res, want map[string]any
	}{
		{"blank redirect and launch URIs", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "name": "c", "redirectUri": "", "launchUri": "", "description": ""},
			map[string]any{"resourceType": "ClientApplication", "name": "c"}},
		{"blank criteria", "AccessPolicy",
			map[string]any{"resourceType": "AccessPolicy", "resource": []any{map[string]any{"resourceType": "Patient", "criteria": ""}}},
			map[string]any{"resourceType": "AccessPolicy", "resource": []any{map[string]any{"resourceType": "Patient"}}}},
		{"blank secret", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "secret": ""},
			map[string]any{"resourceType": "ClientApplication"}},
		{"a type without rules", "Patient",
			map[string]any{"resourceType": "Patient", "gender": "", "name": []any{map[string]any{"family": ""}}},
			map[string]any{"resourceType": "Patient"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := Check(context.Background(), c.typ, c.res, env("p1")); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.res, c.want) {
				t.Fatalf("%v, want %v", c.res, c.want)
			}
		})
	}
}

// InProject lands every write in its project and reads from its store.
func TestInProject(t *testing.T) {
	ctx := context.Background()
	e := InProject(env(""), "p2")
	if p, err := e.Project(ctx, map[string]any{"id": "x", "meta": map[string]any{"project": "p1"}}); p != "p2" || err != nil {
		t.Errorf("Project: %q %v, want p2", p, err)
	}
	err := Check(ctx, "Bot", map[string]any{"resourceType": "Bot", "cronString": "* * * * *"}, e)
	if fhir.AsError(err).Status != 400 {
		t.Errorf("a schedule in p2: %v, want 400", err)
	}
	if err := Check(ctx, "Bot", map[string]any{"resourceType": "Bot", "cronString": "* * * * *"}, InProject(env(""), "p1")); err != nil {
		t.Errorf("a schedule in p1: %v", err)
	}
}
