package search

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/store"
)

// render writes a query's conditions and sort compactly (store.Cond.String).
func render(conds []store.Cond) string {
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = c.String()
	}
	return strings.Join(parts, " & ")
}

func renderSort(sort []store.Sort) string {
	parts := make([]string, len(sort))
	for i, o := range sort {
		parts[i] = o.Field
		if o.Desc {
			parts[i] = "-" + o.Field
		}
	}
	return strings.Join(parts, ",")
}

func mustQuery(t testing.TB, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	if err != nil {
		t.Fatalf("query %q: %v", s, err)
	}
	return v
}

func TestParseFilters(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return ts("2020-01-01T00:00:00Z") }

	tests := []struct {
		name   string
		typ    string
		query  string
		filter string // render
		sort   string
	}{
		{"no parameters", "Patient", "",
			``, ""},
		{"format and pretty are ignored", "Patient", "_format=json&_pretty=true",
			``, ""},
		{"_id list", "Patient", "_id=a,b",
			`_id in ["a" "b"]`, ""},
		{"_id single", "Patient", "_id=a",
			`_id="a"`, ""},
		{"_project id or reference", "Patient", "_project=Project/p1,p2",
			`project in ["p1" "p2"]`, ""},
		{"_lastUpdated range, repeated is AND", "Patient", "_lastUpdated=ge2020-01-01&_lastUpdated=lt2020-02",
			`ts>=2020-01-01T00:00:00.000Z & ts<2020-02-01T00:00:00.000Z`, ""},
		{"_lastUpdated eq covers its precision", "Patient", "_lastUpdated=2020-01-02",
			`(ts>=2020-01-02T00:00:00.000Z and ts<=2020-01-02T23:59:59.999Z)`, ""},
		{"_lastUpdated ne", "Patient", "_lastUpdated=ne2020",
			`(ts<2020-01-01T00:00:00.000Z or ts>2020-12-31T23:59:59.999Z)`, ""},
		{"_lastUpdated gt sa le eb", "Patient", "_lastUpdated=gt2020,sa2021,le2019,eb2018",
			`(ts>2020-12-31T23:59:59.999Z or ts>2021-12-31T23:59:59.999Z or ts<=2019-12-31T23:59:59.999Z or ts<2018-01-01T00:00:00.000Z)`, ""},
		{"_lastUpdated ap widens by a tenth of the distance from now", "Patient", "_lastUpdated=ap2010-01-01",
			`(ts>=2008-12-31T19:12:00.000Z and ts<=2011-01-02T04:47:59.999Z)`, ""},
		{"string starts with, normalised and escaped", "Patient", "name=Mü.ller",
			`s_name^="mu.ller"`, ""},
		{"string alternatives", "Patient", "family=smi,jon",
			`s_family^=["smi" "jon"]`, ""},
		{"string exact", "Patient", "family:exact=Smith",
			`(s_family="smith" and s_family_exact="Smith")`, ""},
		{"string contains", "Patient", "given:contains=an",
			`s_given*="an"`, ""},
		{"string escaped comma", "Patient", `name=a\,b`,
			`s_name^="a,b"`, ""},
		{"string with a NUL byte", "Patient", "name=a%00b",
			`s_name^="a\x00b"`, ""},
		{"string repeated is AND", "Patient", "name=jo&name=sm",
			`s_name^="jo" & s_name^="sm"`, ""},
		{"token code", "Patient", "identifier=123",
			`s_identifier="123"`, ""},
		{"token system|code", "Patient", "identifier=http://h|123",
			`s_identifier="http://h|123"`, ""},
		{"token |code", "Bot", "identifier=|echo",
			`s_identifier="|echo"`, ""},
		{"token system|", "Bot", "identifier=https://ex.com/bots|",
			`s_identifier="https://ex.com/bots|"`, ""},
		{"token escaped pipe stays in the code", "Patient", `identifier=a\|b`,
			`s_identifier="a|b"`, ""},
		{"token not", "Patient", "gender:not=male,other",
			`s_gender not in ["male" "other"]`, ""},
		{"token text", "Patient", "identifier:text=MR",
			`s_identifier_text^="mr"`, ""},
		{"token ContactPoint lower-cased", "Patient", "email=Ann@Example.COM",
			`s_email="ann@example.com"`, ""},
		{"token ContactPoint system|value", "Patient", "telecom=email|Ann@X.org",
			`s_telecom="email|ann@x.org"`, ""},
		{"token boolean", "ProjectMembership", "admin=true",
			`s_admin="true"`, ""},
		{"profile-type", "ProjectMembership", "profile-type=Patient",
			`s_profile_type="Patient"`, ""},
		{"profile-type OR", "ProjectMembership", "profile-type=Patient,Practitioner",
			`s_profile_type in ["Patient" "Practitioner"]`, ""},
		{"profile-type not", "ProjectMembership", "profile-type:not=ClientApplication,Bot",
			`s_profile_type not in ["ClientApplication" "Bot"]`, ""},
		{"profile-type missing", "ProjectMembership", "profile-type:missing=true",
			`s_profile_type missing`, ""},
		{"missing false", "ProjectMembership", "profile:missing=false",
			`s_profile exists`, ""},
		{"date missing tests the low end", "Patient", "birthdate:missing=true",
			`s_birthdate_lo missing`, ""},
		{"reference Type/id", "ProjectMembership", "profile=Patient/p1",
			`s_profile="Patient/p1"`, ""},
		{"reference bare id", "ProjectMembership", "user=u1",
			`s_user="u1"`, ""},
		{"reference absolute", "ProjectMembership", "profile=https://h/fhir/R4/Patient/p1",
			`s_profile in ["https://h/fhir/R4/Patient/p1" "Patient/p1"]`, ""},
		{"reference type modifier", "ProjectMembership", "user:User=u1,u2",
			`s_user in ["User/u1" "User/u2"]`, ""},
		{"reference canonical", "QuestionnaireResponse", "questionnaire=http://q/Questionnaire/intake",
			`s_questionnaire in ["http://q/Questionnaire/intake" "Questionnaire/intake"]`, ""},
		{"date eq", "Patient", "birthdate=2000",
			`(s_birthdate_lo>=2000-01-01T00:00:00.000Z and s_birthdate_lo<=2000-12-31T23:59:59.999Z and s_birthdate_hi<=2000-12-31T23:59:59.999Z)`, ""},
		{"date ge is gt or eq", "Patient", "birthdate=ge2000-06",
			`(s_birthdate_hi>=2000-06-01T00:00:00.000Z and (s_birthdate_hi>2000-06-30T23:59:59.999Z or (s_birthdate_lo>=2000-06-01T00:00:00.000Z and s_birthdate_lo<=2000-06-30T23:59:59.999Z and s_birthdate_hi<=2000-06-30T23:59:59.999Z)))`, ""},
		{"date lt sa eb, keys in order", "Patient", "birthdate=lt2000&death-date=sa2001&_lastUpdated=eb2002",
			`ts<2002-01-01T00:00:00.000Z & s_birthdate_lo<2000-01-01T00:00:00.000Z & s_death_date_lo>2001-12-31T23:59:59.999Z`, ""},
		{"date gt eb le ne: first $or on top, more in $and", "Observation", "date=gt2000&date=eb2001&date=le2002&date=ne2003",
			`s_date_hi>2000-12-31T23:59:59.999Z & s_date_hi<2001-01-01T00:00:00.000Z & (s_date_lo<=2002-12-31T23:59:59.999Z and (s_date_lo<2002-01-01T00:00:00.000Z or (s_date_lo>=2002-01-01T00:00:00.000Z and s_date_lo<=2002-12-31T23:59:59.999Z and s_date_hi<=2002-12-31T23:59:59.999Z))) & (s_date_lo<2003-01-01T00:00:00.000Z or s_date_hi>2003-12-31T23:59:59.999Z)`, ""},
		{"date ap overlaps", "Observation", "date=ap2019-12-31",
			`(s_date_lo<=2020-01-01T02:23:59.999Z and s_date_hi>=2019-12-30T21:36:00.000Z)`, ""},
		{"number eq by precision", "RiskAssessment", "probability=0.5",
			`(s_probability>=0.45 and s_probability<0.55)`, ""},
		{"number prefixes", "RiskAssessment", "probability=gt0.1,le0.9",
			`(s_probability>0.1 or s_probability<=0.9)`, ""},
		{"quantity with unit", "Observation", "value-quantity=gt70|http://unitsofmeasure.org|/min",
			`(s_value_quantity>70 and s_value_quantity_unit="http://unitsofmeasure.org|/min")`, ""},
		{"quantity with code only", "Observation", "value-quantity=ge70||/min",
			`(s_value_quantity>=70 and s_value_quantity_unit="/min")`, ""},
		{"uri equality", "Questionnaire", "url=http://q/x",
			`s_url="http://q/x"`, ""},
		{"uri below", "Questionnaire", "url:below=http://q/",
			`s_url^="http://q/"`, ""},
		{"meta tag on any type", "Bot", "_tag=s|t",
			`s__tag="s|t"`, ""},
		{"sort", "Patient", "_sort=-birthdate,name,_lastUpdated",
			``, `-s_birthdate_lo,s_name,ts`},
		{"sort by _id needs no tie-break", "Patient", "_sort=-_id",
			``, `-_id`},
		{"sort by token", "ProjectMembership", "_sort=profile-type",
			``, `s_profile_type_sort`},
		{"several parameters, in key order", "ProjectMembership", "user-name=al&active=true&profile-type:not=Bot",
			`s_active="true" & s_profile_type not in "Bot" & s_user_name^="al"`, ""},
		{"access-policy", "ProjectMembership", "access-policy=AccessPolicy/a1",
			`s_access_policy="AccessPolicy/a1"`, ""},
		{"external-id", "ProjectMembership", "external-id:exact=E-1",
			`(s_external_id="e-1" and s_external_id_exact="E-1")`, ""},
		{"access policy name", "AccessPolicy", "name=Nur",
			`s_name^="nur"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(tc.typ, mustQuery(t, tc.query))
			if err != nil {
				t.Fatalf("Parse(%s, %q): %v", tc.typ, tc.query, err)
			}
			if got := render(q.Filter); got != tc.filter {
				t.Errorf("filter\n got %s\nwant %s", got, tc.filter)
			}
			if got := renderSort(q.Sort); got != tc.sort {
				t.Errorf("sort\n got %s\nwant %s", got, tc.sort)
			}
		})
	}
}

func TestParseResultParameters(t *testing.T) {
	tests := []struct {
		name      string
		query     string
		count     int
		offset    int
		total     string
		summary   string
		elements  []string
		canonical string
	}{
		{"defaults", "", 20, 0, "", "", nil, "_count=20"},
		{"count and offset", "_count=5&_offset=10", 5, 10, "", "", nil, "_count=5&_offset=10"},
		{"count zero", "_count=0", 0, 0, "", "", nil, "_count=0"},
		{"count max", "_count=1000", 1000, 0, "", "", nil, "_count=1000"},
		{"offset zero is left out of links", "_offset=0", 20, 0, "", "", nil, "_count=20"},
		{"total", "_total=accurate", 20, 0, "accurate", "", nil, "_count=20&_total=accurate"},
		{"summary count is a total alone", "_summary=count", 0, 0, "accurate", "count", nil, "_count=0&_summary=count"},
		{"summary data", "_summary=data", 20, 0, "", "data", nil, "_count=20&_summary=data"},
		{"elements merged", "_elements=id,name&_elements=name,meta", 20, 0, "", "", []string{"id", "name", "meta"}, "_count=20&_elements=id%2Cname%2Cmeta"},
		{"_fields is an alias", "_fields=id", 20, 0, "", "", []string{"id"}, "_count=20&_elements=id"},
		{"filters kept as given", "name=Jo&gender=male,female&_format=json", 20, 0, "", "", nil, "_count=20&gender=male%2Cfemale&name=Jo"},
		{"repeated identical singletons", "_count=5&_count=5", 5, 0, "", "", nil, "_count=5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse("Patient", mustQuery(t, tc.query))
			if err != nil {
				t.Fatal(err)
			}
			if q.Count != tc.count || q.Offset != tc.offset || q.Total != tc.total || q.Summary != tc.summary {
				t.Errorf("count %d offset %d total %q summary %q; want %d %d %q %q",
					q.Count, q.Offset, q.Total, q.Summary, tc.count, tc.offset, tc.total, tc.summary)
			}
			if !reflect.DeepEqual(q.Elements, tc.elements) {
				t.Errorf("elements %v, want %v", q.Elements, tc.elements)
			}
			if got := q.Canonical.Encode(); got != tc.canonical {
				t.Errorf("canonical %s, want %s", got, tc.canonical)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		typ   string
		query string
		msg   string
		expr  string
	}{
		{"unknown parameter", "Patient", "foo=1", "Unknown search parameter: foo", "foo"},
		{"unknown with modifier", "Patient", "foo:exact=1", "Unknown search parameter: foo", "foo"},
		{"parameter of another type", "ProjectMembership", "birthdate=2000", "Unknown search parameter: birthdate", "birthdate"},
		{"left-out parameter", "Patient", "phonetic=smith", "Unknown search parameter: phonetic", "phonetic"},
		{"unknown special", "Patient", "_foo=1", "Unknown search parameter: _foo", "_foo"},
		{"no name", "Patient", ":exact=1", "Search parameter without a name", ":exact"},
		{"unsupported special", "Patient", "_include=Patient:organization", "Unsupported search parameter: _include", "_include"},
		{"chained", "Observation", "subject.name=x", "Chained search is not supported: subject.name", "subject.name"},
		{"count too large", "Patient", "_count=1001", "Invalid _count: must be an integer from 0 to 1000", "_count"},
		{"count negative", "Patient", "_count=-1", "Invalid _count: must be an integer from 0 to 1000", "_count"},
		{"count not a number", "Patient", "_count=ten", "Invalid _count: must be an integer from 0 to 1000", "_count"},
		{"count twice", "Patient", "_count=1&_count=2", "Search parameter _count is given more than once", "_count"},
		{"offset negative", "Patient", "_offset=-5", "Invalid _offset: must be a non-negative integer", "_offset"},
		{"total bad", "Patient", "_total=some", "Invalid _total: must be none, estimate or accurate", "_total"},
		{"summary bad", "Patient", "_summary=yes", "Invalid _summary: must be true, false, text, data or count", "_summary"},
		{"sort unknown", "Patient", "_sort=foo", "Unknown sort parameter: foo", "_sort"},
		{"sort by reference", "Patient", "_sort=organization", "Cannot sort by reference parameter: organization", "_sort"},
		{"sort empty item", "Patient", "_sort=name,", "Empty item in _sort", "_sort"},
		{"bad element", "Patient", "_elements=na me", `Invalid element name in _elements: "na me"`, "_elements"},
		{"string modifier", "Patient", "name:text=x", `Unsupported search modifier "text" in name:text`, "name:text"},
		{"token modifier", "Patient", "gender:in=http://vs", `Unsupported search modifier "in" in gender:in`, "gender:in"},
		{"missing value", "Patient", "gender:missing=maybe", "Search modifier :missing must be true or false", "gender:missing"},
		{"empty value", "Patient", "name=", "Empty value in search parameter name", "name"},
		{"empty alternative", "Patient", "gender=male,", "Empty value in search parameter gender", "gender"},
		{"only accents and spaces", "Patient", "name=%20%20", `Invalid string in search parameter name: "  "`, "name"},
		{"bad date", "Patient", "birthdate=2000-13-01", `Invalid date in search parameter birthdate: "2000-13-01"`, "birthdate"},
		{"bad date prefix", "Patient", "birthdate=xx2000", `Invalid date in search parameter birthdate: "xx2000"`, "birthdate"},
		{"bad lastUpdated", "Patient", "_lastUpdated=yesterday", `Invalid date in search parameter _lastUpdated: "yesterday"`, "_lastUpdated"},
		{"date modifier", "Patient", "birthdate:exact=2000", `Unsupported search modifier "exact" in birthdate:exact`, "birthdate:exact"},
		{"bad boolean", "ProjectMembership", "active=yes", `Invalid boolean in search parameter active: "yes"`, "active"},
		{"bare pipe", "Patient", "identifier=|", `Invalid token in search parameter identifier: "|"`, "identifier"},
		{"reference to a type it cannot hold", "ProjectMembership", "profile=Organization/o1", "Search parameter profile cannot refer to Organization", "profile"},
		{"reference type modifier not a target", "ProjectMembership", "user:Patient=p1", "Search parameter user cannot refer to Patient", "user:Patient"},
		{"reference identifier modifier", "ProjectMembership", "user:identifier=x|y", `Unsupported search modifier "identifier" in user:identifier`, "user:identifier"},
		{"reference malformed", "ProjectMembership", "profile=a/b/c", `Invalid reference in search parameter profile: "a/b/c"`, "profile"},
		{"number malformed", "RiskAssessment", "probability=abc", `Invalid number in search parameter probability: "abc"`, "probability"},
		{"number sa", "RiskAssessment", "probability=sa1", `Invalid number prefix in search parameter probability: "sa1"`, "probability"},
		{"quantity malformed unit", "Observation", "value-quantity=5|mg", `Invalid quantity in search parameter value-quantity: "5|mg"`, "value-quantity"},
		{"_id modifier", "Patient", "_id:not=1", `Unsupported search modifier "not" in _id:not`, "_id:not"},
		{"_project malformed", "Patient", "_project=Org/1", `Invalid project in search parameter _project: "Org/1"`, "_project"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.typ, mustQuery(t, tc.query))
			var fe *fhir.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%q) = %v, want a *fhir.Error", tc.query, err)
			}
			if fe.Status != 400 {
				t.Errorf("status %d, want 400", fe.Status)
			}
			if fe.Message() != tc.msg {
				t.Errorf("message %q, want %q", fe.Message(), tc.msg)
			}
			if got := fe.Outcome.Issue[0].Expression; !reflect.DeepEqual(got, []string{tc.expr}) {
				t.Errorf("expression %v, want [%s]", got, tc.expr)
			}
		})
	}
}
