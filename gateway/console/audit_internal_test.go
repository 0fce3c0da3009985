package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/audit"
)

// The filter form: what it accepts becomes the API's search parameters,
// and each bad value is refused by field before anything is searched.
func TestReadAuditFilter(t *testing.T) {
	long := strings.Repeat("a", maxFilterChars+1)
	cases := []struct {
		name  string
		in    url.Values
		query url.Values // without _sort and _count, which every query has
		errs  []string   // the fields refused
	}{
		{"nothing", url.Values{}, url.Values{"_offset": {"0"}}, nil},
		{"a member's sign-ins", url.Values{"who": {"User/abc-1"}, "kind": {"sign-in"}},
			url.Values{"agent": {"abc-1"}, "subtype": {audit.Pinion + "|sign-in"}, "_offset": {"0"}}, nil},
		{"a person's sign-ins, refusals as their address included", url.Values{"who": {"User/abc-1"}, "email": {" Ida@Example.com "}, "kind": {"sign-in"}},
			url.Values{"_filter": {`agent eq "abc-1" or agent-name eq "ida@example.com"`}, "subtype": {audit.Pinion + "|sign-in"}, "_offset": {"0"}}, nil},
		{"the address typed", url.Values{"email": {"ida@example.com"}}, url.Values{"agent-name:exact": {"ida@example.com"}, "_offset": {"0"}}, nil},
		{"refusals over two days", url.Values{"from": {"2026-12-01"}, "to": {"2026-12-02"}, "outcome": {"refused"}},
			url.Values{"date": {"ge2026-12-01", "le2026-12-02"}, "outcome": {"4"}, "_offset": {"0"}}, nil},
		{"succeeded", url.Values{"outcome": {"succeeded"}}, url.Values{"outcome": {"0"}, "_offset": {"0"}}, nil},
		{"a patient by reference", url.Values{"patient": {" Patient/p1 "}}, url.Values{"patient": {"Patient/p1"}, "_offset": {"0"}}, nil},
		{"a patient by id", url.Values{"patient": {"p1"}}, url.Values{"patient": {"Patient/p1"}, "_offset": {"0"}}, nil},
		{"the second page", url.Values{"offset": {"50"}}, url.Values{"_offset": {"50"}}, nil},
		{"a malformed date", url.Values{"from": {"1 December"}, "to": {"2026-02-30"}}, nil, []string{"from", "to"}},
		{"a time is not a day", url.Values{"from": {"2026-12-01T10:00"}}, nil, []string{"from"}},
		{"an unknown kind", url.Values{"kind": {"sign-in,patient-read"}}, nil, []string{"kind"}},
		{"an unknown outcome", url.Values{"outcome": {"8"}}, nil, []string{"outcome"}},
		{"who is not a reference", url.Values{"who": {"someone@example.com"}}, nil, []string{"who"}},
		{"who with a search modifier", url.Values{"who": {"User/a,User/b"}}, nil, []string{"who"}},
		{"an address that would need quoting", url.Values{"who": {"User/a"}, "email": {`x" or agent eq "User/b@example.com`}}, nil, []string{"email"}},
		{"not an address", url.Values{"email": {"ida"}}, nil, []string{"email"}},
		{"a patient of another type", url.Values{"patient": {"Practitioner/x"}}, nil, []string{"patient"}},
		{"too long", url.Values{"who": {"User/" + long}, "patient": {long}}, nil, []string{"who", "patient"}},
		{"a negative page", url.Values{"offset": {"-1"}}, nil, []string{"offset"}},
		{"a page too far", url.Values{"offset": {"10001"}}, nil, []string{"offset"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, errs := readAuditFilter(tc.in.Get)
			var refused []string
			for _, k := range []string{"from", "to", "kind", "outcome", "who", "email", "patient", "offset"} {
				if errs[k] != "" {
					refused = append(refused, k)
				}
			}
			if !reflect.DeepEqual(refused, tc.errs) {
				t.Fatalf("refused %v (%v), want %v", refused, errs, tc.errs)
			}
			if tc.errs != nil {
				return
			}
			q := f.query()
			if q.Get("_sort") != "-date" || q.Get("_count") != "50" {
				t.Errorf("query %v: not newest first, one page", q)
			}
			q.Del("_sort")
			q.Del("_count")
			if !reflect.DeepEqual(q, tc.query) {
				t.Errorf("query %v, want %v", q, tc.query)
			}
			// The next page's link reads back as the same filter.
			again, errs := readAuditFilter(f.values(f.Offset).Get)
			if len(errs) > 0 || again != f {
				t.Errorf("the filter as a link reads back as %+v %v, want %+v", again, errs, f)
			}
		})
	}
}

// The console's copy of pkg/audit's vocabulary (auditkinds.go) is
// pkg/audit's: every kind it records is offered, in its order, with its
// display, and accepted by the filter. When one is added there, this
// prints the list to paste.
func TestAuditVocabularyInStep(t *testing.T) {
	var want []auditKind
	var lines strings.Builder
	for _, k := range audit.Kinds {
		want = append(want, auditKind{k.Name, k.Display})
		fmt.Fprintf(&lines, "\t{%q, %q},\n", k.Name, k.Display)
	}
	if !reflect.DeepEqual(auditKinds, want) {
		t.Errorf("auditKinds is not audit.Kinds; in auditkinds.go write:\n%s", lines.String())
	}
	if auditSystem != audit.Pinion || outcomeSuccess != audit.Success || outcomeRefused != audit.MinorFailure {
		t.Errorf("codes: %s %s %s, pkg/audit's %s %s %s", auditSystem, outcomeSuccess, outcomeRefused,
			audit.Pinion, audit.Success, audit.MinorFailure)
	}
	for _, k := range audit.Kinds {
		if _, errs := readAuditFilter(url.Values{"kind": {k.Name}}.Get); len(errs) > 0 {
			t.Errorf("kind %s refused: %v", k.Name, errs)
		}
	}
}

// A row reads events as pkg/audit makes them: the kind's display, who
// (named when the project knows them), the client, the address, the
// outcome with its reason, the patients.
func TestAuditRow(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 30, 5, 0, time.UTC)
	cases := []struct {
		name  string
		event audit.Event
		want  auditRow
	}{
		{"a refused sign-in, nobody known", audit.Event{Kind: "sign-in", Time: at, Outcome: audit.MinorFailure,
			Detail: "Email or password is invalid", Name: "ida@example.com", Address: "10.0.0.7"},
			auditRow{When: "2026-12-01 09:30:05 UTC", Recorded: "2026-12-01T09:30:05.000Z", What: "Sign-in", Who: "ida@example.com",
				From: "10.0.0.7", Outcome: "refused", Detail: "Email or password is invalid", Refused: true}},
		{"a member's sign-in through a client", audit.Event{Kind: "sign-in", Time: at, Outcome: audit.Success,
			Who: "User/u1", Client: "ClientApplication/c1", Address: "10.0.0.8"},
			auditRow{When: "2026-12-01 09:30:05 UTC", Recorded: "2026-12-01T09:30:05.000Z", What: "Sign-in", Who: "Ida Audited",
				WhoRef: "User/u1", Client: "ClientApplication/c1", From: "10.0.0.8", Outcome: "succeeded"}},
		{"a patient's record read", audit.Event{Kind: "patient-read", Time: at, Outcome: audit.Success,
			Who: "User/u2", Client: "ClientApplication/app", Patients: []string{"Patient/p1"}, Entities: []audit.Entity{{What: "Observation/o1"}}},
			auditRow{When: "2026-12-01 09:30:05 UTC", Recorded: "2026-12-01T09:30:05.000Z", What: "Patient record read", Who: "User/u2",
				WhoRef: "User/u2", Client: "Front desk app", Outcome: "succeeded", Patients: []string{"p1"}}},
		{"a kind of a newer build", audit.Event{Kind: "something-new", Time: at, Outcome: audit.SeriousFailure, Detail: "disk full"},
			auditRow{When: "2026-12-01 09:30:05 UTC", Recorded: "2026-12-01T09:30:05.000Z", What: "something-new",
				Outcome: "failed", Detail: "disk full", Refused: true}},
	}
	names := map[string]string{"User/u1": "Ida Audited", "ClientApplication/app": "Front desk app"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.event.Resource())
			if err != nil {
				t.Fatal(err)
			}
			var e auditEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			if got := rowOf(e, names); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("row\n%+v, want\n%+v", got, tc.want)
			}
		})
	}
}

// An event made by other writers (a bot run's, one created through the
// API) has no Pinion subtype: its own subtype or type names it.
func TestAuditRowOtherEvents(t *testing.T) {
	for _, tc := range []struct{ name, event, what string }{
		{"a bot run", `{"type":{"code":"execute","display":"Execute"},"subtype":[{"code":"execute"}],"outcome":"0","agent":[{"who":{"reference":"Bot/b","display":"Lab bot"},"requestor":true}]}`, "execute"},
		{"no subtype", `{"type":{"system":"x","code":"rest","display":"Restful Operation"},"outcome":"0","agent":[]}`, "Restful Operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e auditEvent
			if err := json.Unmarshal([]byte(tc.event), &e); err != nil {
				t.Fatal(err)
			}
			if r := rowOf(e, nil); r.What != tc.what {
				t.Errorf("what %q, want %q", r.What, tc.what)
			}
		})
	}
}

func TestNextOffset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links []bundleLink
		want  int
	}{
		{"no next", []bundleLink{{"self", "http://x/fhir/R4/AuditEvent?_offset=0"}}, 0},
		{"next, cut short", []bundleLink{{"self", "http://x/"}, {"next", "http://x/fhir/R4/AuditEvent?_count=50&_offset=37"}}, 37},
		{"a link without an offset", []bundleLink{{"next", "http://x/fhir/R4/AuditEvent?_count=50"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextOffset(tc.links); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestNameOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []humanName
		want  string
	}{
		{"none", nil, ""},
		{"given and family", []humanName{{Given: []string{"Ada", "M."}, Family: "Lovelace"}}, "Ada M. Lovelace"},
		{"the official one", []humanName{{Use: "nickname", Text: "Addie"}, {Use: "official", Family: "Lovelace"}}, "Lovelace"},
		{"text first", []humanName{{Text: "Ada Lovelace", Family: "Byron"}}, "Ada Lovelace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nameOf(tc.names); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
