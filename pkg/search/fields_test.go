package search

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// decode reads resource JSON the way the repository does: numbers as json.Number.
func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestFields(t *testing.T) {
	tests := []struct {
		name     string
		typ      string
		resource string
		floats   bool           // decode numbers as float64, not json.Number
		want     map[string]any // these fields, exactly
		absent   []string       // and not these
	}{
		{
			name:     "human name parts, full name, accents folded",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","name":[{"given":["José","Q"],"family":"Müller","prefix":["Dr."],"text":"Dr. José Müller"}]}`,
			want: map[string]any{
				"s_name":         []string{"jose q muller", "dr. jose muller", "muller", "jose", "q", "dr."},
				"s_name_exact":   []string{"José Q Müller", "Dr. José Müller", "Müller", "José", "Q", "Dr."},
				"s_family":       []string{"muller"},
				"s_family_exact": []string{"Müller"},
				"s_given":        []string{"jose", "q"},
			},
			// s_name_sort too: strings sort by s_name itself.
			absent: []string{"s_phonetic", "s_birthdate_lo", "s_identifier", "s_name_sort"},
		},
		{
			name:     "identifier with and without system, type text",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","identifier":[{"system":"http://h/mrn","value":"123","type":{"text":"MRN"}},{"value":"abc"},{"system":"http://h/ssn"}]}`,
			want: map[string]any{
				"s_identifier":      []string{"123", "http://h/mrn|123", "http://h/mrn|", "abc", "|abc", "http://h/ssn|"},
				"s_identifier_text": []string{"mrn"},
				"s_identifier_sort": "123",
			},
		},
		{
			name:     "telecom: email and phone lower-cased as ContactPoints",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","telecom":[{"system":"email","value":"Ann@Example.COM"},{"system":"phone","value":"555-1234"}]}`,
			want: map[string]any{
				"s_email":   []string{"ann@example.com", "email|ann@example.com", "email|"},
				"s_phone":   []string{"555-1234", "phone|555-1234", "phone|"},
				"s_telecom": []string{"ann@example.com", "email|ann@example.com", "email|", "555-1234", "phone|555-1234", "phone|"},
			},
		},
		{
			name:     "birthdate covers its precision, gender and active are plain tokens",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","birthDate":"2000-02","gender":"female","active":false}`,
			want: map[string]any{
				"s_birthdate_lo": ts("2000-02-01T00:00:00Z"),
				"s_birthdate_hi": ts("2000-02-29T23:59:59.999Z"),
				"s_gender":       []string{"female"},
				"s_gender_sort":  "female",
				"s_active":       []string{"false"},
				"s_deceased":     []string{"false"},
			},
		},
		{
			name:     "deceasedDateTime makes deceased true and sets death-date",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","deceasedDateTime":"2020-03-04T05:06:07+02:00"}`,
			want: map[string]any{
				"s_deceased":      []string{"true"},
				"s_death_date_lo": ts("2020-03-04T03:06:07Z"),
				"s_death_date_hi": ts("2020-03-04T03:06:07.999Z"),
			},
		},
		{
			name:     "absolute and versioned references are stored as Type/id and id; contained ones are not",
			typ:      "Patient",
			resource: `{"resourceType":"Patient","generalPractitioner":[{"reference":"https://h/fhir/R4/Practitioner/9/_history/2"},{"reference":"#c1"},{"reference":"Organization/o1"}]}`,
			want:     map[string]any{"s_general_practitioner": []string{"Practitioner/9", "9", "Organization/o1", "o1"}},
		},
		{
			name: "membership: profile-type is the profile reference's type",
			typ:  "ProjectMembership",
			resource: `{"resourceType":"ProjectMembership","project":{"reference":"Project/p1"},"user":{"reference":"User/u1"},
				"profile":{"reference":"Practitioner/x1","display":"Alice"},"accessPolicy":{"reference":"AccessPolicy/a1"},
				"access":[{"policy":{"reference":"AccessPolicy/a2"}}],"admin":true,"active":true,"userName":"alice","externalId":"E-1"}`,
			want: map[string]any{
				"s_profile_type":      []string{"Practitioner"},
				"s_profile":           []string{"Practitioner/x1", "x1"},
				"s_project":           []string{"Project/p1", "p1"},
				"s_user":              []string{"User/u1", "u1"},
				"s_access_policy":     []string{"AccessPolicy/a1", "a1", "AccessPolicy/a2", "a2"},
				"s_admin":             []string{"true"},
				"s_active":            []string{"true"},
				"s_user_name":         []string{"alice"},
				"s_external_id":       []string{"e-1"},
				"s_external_id_exact": []string{"E-1"},
			},
		},
		{
			name:     "membership without a profile has no profile-type",
			typ:      "ProjectMembership",
			resource: `{"resourceType":"ProjectMembership","project":{"reference":"Project/p1"}}`,
			want:     map[string]any{"s_project": []string{"Project/p1", "p1"}},
			absent:   []string{"s_profile_type", "s_profile", "s_profile_type_sort"},
		},
		{
			name:     "profile-type from an absolute reference",
			typ:      "ProjectMembership",
			resource: `{"resourceType":"ProjectMembership","profile":{"reference":"https://example.com/fhir/R4/ClientApplication/c1"}}`,
			want:     map[string]any{"s_profile_type": []string{"ClientApplication"}},
		},
		{
			name:     "bot identifier and name",
			typ:      "Bot",
			resource: `{"resourceType":"Bot","name":"Echo Bot","identifier":[{"system":"https://ex.com/bots","value":"echo"}]}`,
			want: map[string]any{
				"s_identifier": []string{"echo", "https://ex.com/bots|echo", "https://ex.com/bots|"},
				"s_name":       []string{"echo bot"},
				"s_name_exact": []string{"Echo Bot"},
			},
		},
		{
			name:     "meta tags, profiles, security and source apply to every type",
			typ:      "AccessPolicy",
			resource: `{"resourceType":"AccessPolicy","name":"Nurses","meta":{"tag":[{"system":"s","code":"t"}],"profile":["http://p/sd|1.0"],"source":"http://src"}}`,
			want: map[string]any{
				"s__tag":     []string{"t", "s|t", "s|"},
				"s__profile": []string{"http://p/sd|1.0"},
				"s__source":  []string{"http://src"},
				"s_name":     []string{"nurses"},
			},
		},
		{
			name: "observation: open period, quantity with units, codeable concept text, patient only for patients",
			typ:  "Observation",
			resource: `{"resourceType":"Observation","status":"final","subject":{"reference":"Group/g1"},
				"code":{"coding":[{"system":"http://loinc.org","code":"8867-4","display":"Heart rate"}],"text":"HR"},
				"effectivePeriod":{"start":"2021-05-06T07:08:09Z"},
				"valueQuantity":{"value":72.5,"unit":"beats/min","system":"http://unitsofmeasure.org","code":"/min"}}`,
			want: map[string]any{
				"s_date_lo":             ts("2021-05-06T07:08:09Z"),
				"s_date_hi":             maxTime,
				"s_value_quantity":      []float64{72.5},
				"s_value_quantity_unit": []string{"beats/min", "/min", "http://unitsofmeasure.org|/min"},
				"s_code":                []string{"8867-4", "http://loinc.org|8867-4", "http://loinc.org|"},
				"s_code_text":           []string{"heart rate", "hr"},
				"s_subject":             []string{"Group/g1", "g1"},
			},
			absent: []string{"s_patient"},
		},
		{
			name:     "where(resolve() is Patient) keeps patient references",
			typ:      "Observation",
			resource: `{"resourceType":"Observation","subject":{"reference":"Patient/p9"}}`,
			want:     map[string]any{"s_patient": []string{"Patient/p9", "p9"}, "s_subject": []string{"Patient/p9", "p9"}},
		},
		{
			name:     "numbers decoded as float64 work too",
			typ:      "RiskAssessment",
			resource: `{"resourceType":"RiskAssessment","prediction":[{"probabilityDecimal":0.25},{"probabilityDecimal":0.5}]}`,
			floats:   true,
			want:     map[string]any{"s_probability": []float64{0.25, 0.5}},
		},
		{
			name:     "canonical references as written and without version",
			typ:      "QuestionnaireResponse",
			resource: `{"resourceType":"QuestionnaireResponse","questionnaire":"http://q/Questionnaire/intake|2"}`,
			want:     map[string]any{"s_questionnaire": []string{"http://q/Questionnaire/intake|2", "http://q/Questionnaire/intake"}},
		},
		{
			name:     "user email is a string parameter",
			typ:      "User",
			resource: `{"resourceType":"User","email":"Bob@Example.com","project":{"reference":"Project/p1"}}`,
			want: map[string]any{
				"s_email":       []string{"bob@example.com"},
				"s_email_exact": []string{"Bob@Example.com"},
				"s_project":     []string{"Project/p1", "p1"},
			},
		},
		{
			name:     "a resource with no values has no fields",
			typ:      "Practitioner",
			resource: `{"resourceType":"Practitioner"}`,
			want:     map[string]any{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := decode(t, tc.resource)
			if tc.floats {
				res = nil
				if err := json.Unmarshal([]byte(tc.resource), &res); err != nil {
					t.Fatal(err)
				}
			}
			got := Fields(tc.typ, res)
			for k, want := range tc.want {
				if !reflect.DeepEqual(got[k], want) {
					t.Errorf("%s = %#v, want %#v", k, got[k], want)
				}
			}
			for _, k := range tc.absent {
				if v, ok := got[k]; ok {
					t.Errorf("%s = %#v, want absent", k, v)
				}
			}
			if len(tc.want) == 0 && len(got) != 0 {
				t.Errorf("got %v, want no fields", got)
			}
			// Every value must be of a kind every store takes, and every
			// key an s_ field.
			for k, v := range got {
				switch v.(type) {
				case string, []string, []float64, time.Time:
				default:
					t.Errorf("%s is a %T", k, v)
				}
				if !strings.HasPrefix(k, "s_") {
					t.Errorf("field %s lacks the s_ prefix", k)
				}
			}
		})
	}
}

func TestFieldsUnknownTypeAndNil(t *testing.T) {
	if got := Fields("Patient", nil); len(got) != 0 {
		t.Errorf("nil resource: %v", got)
	}
	got := Fields("NoSuchType", decode(t, `{"meta":{"tag":[{"code":"x"}]},"name":"n"}`))
	if !reflect.DeepEqual(got, map[string]any{"s__tag": []string{"x", "|x"}, "s__tag_sort": "x"}) {
		t.Errorf("unknown type: %v", got)
	}
}

func TestParamsAndIndexKeys(t *testing.T) {
	codes := func(typ string) []string {
		var out []string
		for _, p := range Params(typ) {
			out = append(out, p.Code)
		}
		return out
	}
	tests := []struct {
		name string
		typ  string
		want []string
	}{
		{"ProjectMembership", "ProjectMembership", []string{"_id", "_lastUpdated", "_profile", "_project", "_security", "_source", "_tag",
			"access-policy", "active", "admin", "external-id", "identifier", "profile", "profile-type", "project", "user", "user-name"}},
		{"Bot", "Bot", []string{"_id", "_lastUpdated", "_profile", "_project", "_security", "_source", "_tag",
			"category", "cds-hook", "identifier", "name"}},
		{"AccessPolicy", "AccessPolicy", []string{"_id", "_lastUpdated", "_profile", "_project", "_security", "_source", "_tag", "name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := codes(tc.typ); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Params(%s) = %v, want %v", tc.typ, got, tc.want)
			}
		})
	}
	patient := codes("Patient")
	for _, c := range []string{"name", "family", "given", "identifier", "birthdate", "email", "gender", "phone", "telecom", "address", "general-practitioner", "deceased"} {
		if !slices.Contains(patient, c) {
			t.Errorf("Patient lacks %s", c)
		}
	}
	if slices.Contains(patient, "phonetic") {
		t.Error("Patient offers phonetic, which is not implemented")
	}
	if !slices.IsSorted(patient) {
		t.Errorf("Params(Patient) not sorted: %v", patient)
	}
	for _, p := range Params("ProjectMembership") {
		if p.Code == "profile" && !reflect.DeepEqual(p.Targets, []string{"Bot", "ClientApplication", "Patient", "Practitioner", "RelatedPerson"}) {
			t.Errorf("profile targets %v", p.Targets)
		}
		if p.Code == "profile-type" && p.Definition != "https://medplum.com/fhir/SearchParameter/ProjectMembership-profile-type" {
			t.Errorf("profile-type definition %q", p.Definition)
		}
	}
	keys := IndexKeys("ProjectMembership")
	want := []string{"s__security", "s__tag", "s_access_policy", "s_active", "s_admin", "s_external_id", "s_identifier",
		"s_profile", "s_profile_type", "s_project", "s_user", "s_user_name"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("IndexKeys = %v, want %v", keys, want)
	}
}

func TestTableIsSmall(t *testing.T) {
	if len(table) > 512<<10 {
		t.Errorf("params.txt is %d bytes; keep it well under 1 MiB", len(table))
	}
	if _, err := parseTable(table); err != nil {
		t.Fatal(err)
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"ascii", "  John   SMITH ", "john smith"},
		{"accents", "Zoë Ñúñez", "zoe nunez"},
		{"decomposed accents", "Jose\u0301", "jose"},
		{"special letters", "Straße Øre Łódź", "strasse ore lodz"},
		{"non-latin kept", "Анна", "анна"},
		{"empty", " \t", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := normalize(tc.in); got != tc.want {
				t.Errorf("normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	long := strings.Repeat("é", 2000)
	if got := normalize(long); len(got) > maxStored {
		t.Errorf("normalize kept %d bytes", len(got))
	}
}

func TestParseDate(t *testing.T) {
	tests := []struct {
		name, in string
		lo, hi   string // RFC 3339; empty for an error
	}{
		{"year", "2000", "2000-01-01T00:00:00Z", "2000-12-31T23:59:59.999Z"},
		{"month", "2000-02", "2000-02-01T00:00:00Z", "2000-02-29T23:59:59.999Z"},
		{"day", "2000-02-03", "2000-02-03T00:00:00Z", "2000-02-03T23:59:59.999Z"},
		{"minute", "2000-02-03T04:05", "2000-02-03T04:05:00Z", "2000-02-03T04:05:59.999Z"},
		{"second with zone", "2000-02-03T04:05:06+01:00", "2000-02-03T03:05:06Z", "2000-02-03T03:05:06.999Z"},
		{"zone arriving as space", "2000-02-03T04:05:06 01:00", "2000-02-03T03:05:06Z", "2000-02-03T03:05:06.999Z"},
		{"tenths", "2000-02-03T04:05:06.1Z", "2000-02-03T04:05:06.1Z", "2000-02-03T04:05:06.199Z"},
		{"micros truncated", "2000-02-03T04:05:06.123456Z", "2000-02-03T04:05:06.123Z", "2000-02-03T04:05:06.123Z"},
		{"bad month", "2000-13", "", ""},
		{"bad day", "2001-02-29", "", ""},
		{"trailing junk", "2000-01-01x", "", ""},
		{"no fraction digits", "2000-01-01T00:00:00.Z", "", ""},
		{"short", "200", "", ""},
		{"year zero", "0000", "", ""},
		{"empty", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi, err := parseDate(tc.in)
			if tc.lo == "" {
				if err == nil {
					t.Fatalf("parseDate(%q) = %v, %v; want error", tc.in, lo, hi)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDate(%q): %v", tc.in, err)
			}
			if !lo.Equal(ts(tc.lo)) || !hi.Equal(ts(tc.hi)) {
				t.Errorf("parseDate(%q) = %v, %v; want %s, %s", tc.in, lo, hi, tc.lo, tc.hi)
			}
		})
	}
}
