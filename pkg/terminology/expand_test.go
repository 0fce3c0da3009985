package terminology

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

var when = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

func codes(e *Expansion) string {
	var s []string
	for _, c := range e.Expansion.Contains {
		s = append(s, c.Code)
	}
	return strings.Join(s, ",")
}

func TestExpand(t *testing.T) {
	const gender = "http://hl7.org/fhir/ValueSet/administrative-gender"
	const marital = "http://hl7.org/fhir/ValueSet/marital-status"
	tests := []struct {
		name, query, codes string
		total              int
	}{
		{"whole value set", "url=" + gender, "male,female,other,unknown", 4},
		{"with a version", "url=" + gender + "|4.0.1", "male,female,other,unknown", 4},
		{"filter on display, any case", "url=" + gender + "&filter=FEM", "female", 1},
		// S is "Never Married": found by its code, the others by their displays.
		{"filter on the code or the display", "url=" + marital + "&filter=s", "L,P,S,T", 4},
		{"filter words all in the display", "url=" + marital + "&filter=legally%20sep", "L", 1},
		{"filter matching none", "url=" + gender + "&filter=zzz", "", 0},
		{"count and offset", "url=" + gender + "&count=2&offset=1", "female,other", 4},
		{"offset past the end", "url=" + gender + "&offset=10", "", 4},
		{"count 0 counts", "url=" + gender + "&count=0", "", 4},
		// Without a count, a filtered expansion is a typeahead page of 10.
		{"filter pages by 10", "url=http://hl7.org/fhir/ValueSet/languages&filter=e", "", -1},
		{"Medplum's own value set", "url=https://medplum.com/fhir/ValueSet/project-membership-profile-type", "Patient,Practitioner,RelatedPerson,Admin", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			e, err := Expand(q, when)
			if err != nil {
				t.Fatalf("Expand(%s): %v", tc.query, err)
			}
			if e.ResourceType != "ValueSet" || e.URL != strings.Split(q.Get("url"), "|")[0] || e.Expansion.Timestamp != "2026-11-27T08:00:00.000Z" {
				t.Errorf("header %+v", e)
			}
			if tc.total < 0 {
				if n := len(e.Expansion.Contains); n != FilterCount || e.Expansion.Total <= FilterCount {
					t.Errorf("%d codes of %d, want a page of %d", n, e.Expansion.Total, FilterCount)
				}
				return
			}
			if got := codes(e); got != tc.codes || e.Expansion.Total != tc.total {
				t.Errorf("codes %q total %d, want %q total %d", got, e.Expansion.Total, tc.codes, tc.total)
			}
			for _, c := range e.Expansion.Contains {
				if c.System == "" || c.Display == "" {
					t.Errorf("coding %+v lacks its system or display", c)
				}
			}
		})
	}
}

func TestExpandRefusals(t *testing.T) {
	long := strings.Repeat("a", MaxFilterChars+1)
	tests := []struct{ name, query, msg string }{
		{"no url", "filter=x", "Missing url"},
		{"unknown url", "url=http://example.com/vs|2", "ValueSet http://example.com/vs not found"},
		{"not expandable here", "url=http://hl7.org/fhir/ValueSet/clinical-findings",
			"ValueSet http://hl7.org/fhir/ValueSet/clinical-findings cannot be expanded: it draws on code system http://snomed.info/sct, not in the definitions"},
		{"count too large", "url=x&count=1001", "Invalid count: must be an integer from 0 to 1000"},
		{"count not a number", "url=x&count=ten", "Invalid count: must be an integer from 0 to 1000"},
		{"offset negative", "url=x&offset=-1", "Invalid offset: must be a non-negative integer"},
		{"filter too long", "url=x&filter=" + long, "Invalid filter: at most 256 characters"},
		{"url twice", "url=x&url=y", "Parameter url is given more than once"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			_, err := Expand(q, when)
			var fe *fhir.Error
			if !errors.As(err, &fe) || fe.Status != 400 || fe.Message() != tc.msg {
				t.Errorf("Expand(%s) = %v, want 400 %q", tc.query, err, tc.msg)
			}
		})
	}
}

// TestEveryBoundValueSet: each value set in the table parses, and each
// expandable one has codes with a system.
func TestEveryBoundValueSet(t *testing.T) {
	if n := Len(); n < 500 {
		t.Fatalf("%d value sets, want the ~600 R4 and Medplum bind", n)
	}
	for u, vs := range load() {
		if vs.Unexpandable == "" && len(vs.Codes) == 0 {
			t.Errorf("%s: no codes and no reason", u)
		}
	}
}

func TestValidateCode(t *testing.T) {
	const gender = "url=http://hl7.org/fhir/ValueSet/administrative-gender&system=http://hl7.org/fhir/administrative-gender"
	tests := []struct {
		name, query string
		result      bool
		display     string
	}{
		{"a code of the set", gender + "&code=female", true, "Female"},
		{"with its display", gender + "&code=female&display=Female", true, "Female"},
		{"with another display", gender + "&code=female&display=Woman", false, "Female"},
		{"not in the set", gender + "&code=woman", false, ""},
		{"another system", "url=http://hl7.org/fhir/ValueSet/administrative-gender&system=http://x&code=female", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			p, err := ValidateCode(q)
			if err != nil {
				t.Fatal(err)
			}
			if got := *p.Parameter[0].ValueBoolean; p.Parameter[0].Name != "result" || got != tc.result {
				t.Errorf("result %v, want %v", got, tc.result)
			}
			display := ""
			if len(p.Parameter) > 1 {
				display = p.Parameter[1].ValueString
			}
			if display != tc.display {
				t.Errorf("display %q, want %q", display, tc.display)
			}
		})
	}
	for query, msg := range map[string]string{
		"system=a&code=b": "No ValueSet specified",
		"url=x&code=b":    "No coding specified",
		"url=http://example.com/vs&system=a&code=b": "ValueSet http://example.com/vs not found",
	} {
		q, _ := url.ParseQuery(query)
		_, err := ValidateCode(q)
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || fe.Message() != msg {
			t.Errorf("ValidateCode(%s) = %v, want 400 %q", query, err, msg)
		}
	}
}
