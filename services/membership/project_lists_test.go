package membership

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
)

func TestReadList(t *testing.T) {
	parsed := errors.New("parsed")
	parse := func([]byte) ([]any, error) { return nil, parsed }
	for _, body := range []string{`[]`, ` [1]`, "\n\t[{}]", `[`} {
		if _, err := readList([]byte(body), parse); err != parsed {
			t.Errorf("%q: %v, want it handed to the parser", body, err)
		}
	}
	// Only an array replaces the list: `null` must not clear it.
	for _, body := range []string{`null`, `{"name":"x"}`, `""`, ``, `   `, `1`, `true`} {
		_, err := readList([]byte(body), parse)
		wantError(t, err, 400, "The body must be a JSON array", "")
	}
}

func TestParseSecrets(t *testing.T) {
	const shape = "Secrets must be an array of {name, value[x]}"
	cases := []struct {
		name, body string
		text, expr string
	}{
		// The cases the whole-stack test names, with its texts.
		{"object", `{"name":"x"}`, shape, ""},
		{"no name", `[{"valueString":"x"}]`, "Secret name is required", "[0].name"},
		{"two values", `[{"name":"a","valueString":"x","valueBoolean":true}]`, "A secret has exactly one value", "[0]"},
		{"no value", `[{"name":"a"}]`, "A secret has exactly one value", "[0]"},
		{"duplicate", `[{"name":"a","valueString":"1"},{"name":"a","valueString":"2"}]`, "Duplicate secret name: a", "[1].name"},
		{"string as number", `[{"name":"a","valueString":5}]`, "valueString must be a string", "[0].valueString"},
		{"empty string", `[{"name":"a","valueString":""}]`, "valueString must be a string", "[0].valueString"},
		{"boolean as text", `[{"name":"a","valueBoolean":"true"}]`, "valueBoolean must be true or false", "[0].valueBoolean"},
		{"fractional integer", `[{"name":"a","valueInteger":1.5}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"huge integer", `[{"name":"a","valueInteger":4294967296}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"unknown field", `[{"name":"a","valueString":"x","note":"y"}]`, "Unknown secret field: note", "[0].note"},
		{"trailing data", `[] []`, shape, ""},

		{"null", `null`, "", ""}, // decodes to no secrets; readList refuses it first
		{"trailing text", `[] x`, shape, ""},
		{"stray bracket", `[]]`, shape, ""},
		{"stray brace", `[]}`, shape, ""},
		{"not JSON", `[{]`, shape, ""},
		{"entry a number", `[1]`, shape, ""},
		{"entry a list", `[[{"name":"a"}]]`, shape, ""},
		{"entry null", `[null]`, "Secret name is required", "[0].name"},
		{"name blank", `[{"name":"  ","valueString":"x"}]`, "Secret name is required", "[0].name"},
		{"name a number", `[{"name":5,"valueString":"x"}]`, "Secret name is required", "[0].name"},
		{"later entry named", `[{"name":"a","valueString":"x"},{"name":"b","valueString":"y"},{"name":"c"}]`, "A secret has exactly one value", "[2]"},
		{"object as string", `[{"name":"a","valueString":{"v":"x"}}]`, "valueString must be a string", "[0].valueString"},
		{"decimal as text", `[{"name":"a","valueDecimal":"1.5"}]`, "valueDecimal must be a number", "[0].valueDecimal"},
		{"integer as text", `[{"name":"a","valueInteger":"5"}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"integer with exponent", `[{"name":"a","valueInteger":1e3}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"integer above int32", `[{"name":"a","valueInteger":2147483648}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"integer below int32", `[{"name":"a","valueInteger":-2147483649}]`, "valueInteger must be a 32-bit integer", "[0].valueInteger"},
		{"boolean null", `[{"name":"a","valueBoolean":null}]`, "valueBoolean must be true or false", "[0].valueBoolean"},
		{"other value type", `[{"name":"a","valueCode":"x"}]`, "Unknown secret field: valueCode", "[0].valueCode"},
		// Fields are checked in name order, so the answer is the same each time.
		{"two bad fields", `[{"name":"a","valueString":5,"note":"y"}]`, "Unknown secret field: note", "[0].note"},
		{"two bad values", `[{"name":"a","valueString":5,"valueBoolean":"x"}]`, "valueBoolean must be true or false", "[0].valueBoolean"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			list, err := parseSecrets([]byte(tc.body))
			if tc.text == "" {
				if err != nil || len(list) != 0 {
					t.Fatalf("parseSecrets = %v, %v; want no secrets", list, err)
				}
				return
			}
			wantError(t, err, 400, tc.text, tc.expr)
		})
	}
}

// Accepted secrets are stored as sent: numbers keep their digits, and
// names that differ only in case or spacing are different secrets.
func TestParseSecretsAccepted(t *testing.T) {
	body := `[
		{"name":"API_KEY","valueString":"sk-\"very\"-secret"},
		{"name":"FLAG","valueBoolean":false},
		{"name":"RATE","valueDecimal":0.250},
		{"name":"BIG","valueDecimal":12345678901234567890.5},
		{"name":"PORT","valueInteger":-2147483648},
		{"name":"MAX","valueInteger":2147483647},
		{"name":"api_key","valueString":"other"},
		{"name":"API_KEY ","valueString":"spaced"}
	] `
	list, err := parseSecrets([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(list)
	want := `[{"name":"API_KEY","valueString":"sk-\"very\"-secret"},{"name":"FLAG","valueBoolean":false},` +
		`{"name":"RATE","valueDecimal":0.250},{"name":"BIG","valueDecimal":12345678901234567890.5},` +
		`{"name":"PORT","valueInteger":-2147483648},{"name":"MAX","valueInteger":2147483647},` +
		`{"name":"api_key","valueString":"other"},{"name":"API_KEY ","valueString":"spaced"}]`
	if string(got) != want {
		t.Errorf("secrets\n %s\nwant\n %s", got, want)
	}
}

func TestParseSecretsEmpty(t *testing.T) {
	list, err := parseSecrets([]byte(`[]`))
	if err != nil || list == nil || len(list) != 0 {
		t.Errorf("parseSecrets([]) = %#v, %v; want an empty list", list, err)
	}
}

func TestValidSecretValue(t *testing.T) {
	cases := []struct {
		field string
		v     any
		ok    bool
	}{
		{"valueString", "x", true},
		{"valueString", strings.Repeat("x", 100_000), true},
		{"valueString", "", false},
		{"valueString", json.Number("1"), false},
		{"valueBoolean", true, true},
		{"valueBoolean", false, true},
		{"valueBoolean", "true", false},
		{"valueDecimal", json.Number("0.25"), true},
		{"valueDecimal", json.Number("-1e10"), true},
		{"valueDecimal", 0.25, false}, // only as decoded with UseNumber
		{"valueDecimal", "0.25", false},
		{"valueInteger", json.Number("0"), true},
		{"valueInteger", json.Number("-7"), true},
		{"valueInteger", json.Number("2147483647"), true},
		{"valueInteger", json.Number("2147483648"), false},
		{"valueInteger", json.Number("1.0"), false},
		{"valueInteger", 7, false},
		{"valueCode", "x", false},
		{"name", "x", false},
		{"", "x", false},
	}
	for _, tc := range cases {
		if got := validSecretValue(tc.field, tc.v); got != tc.ok {
			t.Errorf("validSecretValue(%q, %#v) = %v, want %v", tc.field, tc.v, got, tc.ok)
		}
	}
}

func TestParseSites(t *testing.T) {
	list, err := parseSites([]byte(`[{"name":"portal","domain":["portal.example.com"]},{}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{map[string]any{"name": "portal", "domain": []any{"portal.example.com"}}, map[string]any{}}
	if !reflect.DeepEqual(list, want) {
		t.Errorf("sites %#v, want %#v", list, want)
	}
	if list, err := parseSites([]byte(`[]`)); err != nil || len(list) != 0 {
		t.Errorf("parseSites([]) = %v, %v", list, err)
	}
	// The fields of a site are Project.site's to check, when the project is written.
	for _, body := range []string{`{"name":"x"}`, `[1]`, `["portal"]`, `[[]]`, `[{}] []`, `[{]`} {
		_, err := parseSites([]byte(body))
		wantError(t, err, 400, "Sites must be an array of {name, domain[]}", "")
	}
}

func TestReplaceListRefusals(t *testing.T) {
	project, other := fixtureProject(t, nil), fixtureProject(t, nil)
	missing := uuid.NewString()
	handlers := map[string]bus.Handler{"secrets": stack.svc.setSecrets, "sites": stack.svc.setSites}
	cases := []struct {
		name              string
		by                *bus.Principal
		project           string
		contentType, body string
		status            int
		text, expr        string
	}{
		{"anonymous", nil, project, "application/json", `[]`, 401, "Unauthorized", ""},
		{"a member, not an admin", memberOf(project), project, "application/json", `[]`, 403, "Forbidden", ""},
		{"another project's admin", adminOf(other), project, "application/json", `[]`, 403, "Forbidden", ""},
		{"not JSON", adminOf(project), project, "text/plain", `[]`, 415, "Unsupported media type", ""},
		{"null, which must not clear the list", adminOf(project), project, "application/json", `null`, 400, "The body must be a JSON array", ""},
		{"an object", adminOf(project), project, "application/json", `{"name":"x"}`, 400, "The body must be a JSON array", ""},
		{"no such project", adminOf(missing), missing, "application/json", `[]`, 404, "Not found", ""},
	}
	for _, tc := range cases {
		for name, h := range handlers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				resp, err := call(t, h, request(tc.by, map[string]string{"projectId": tc.project}, tc.contentType, tc.body))
				wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
			})
		}
	}
	resp, err := call(t, stack.svc.setSecrets, request(adminOf(project), map[string]string{"projectId": project}, "application/json", `[{"name":"a"}]`))
	wantFHIRError(t, resp, err, 400, "A secret has exactly one value", "[0]")
	resp, err = call(t, stack.svc.setSites, request(adminOf(project), map[string]string{"projectId": project}, "application/json", `["a.example"]`))
	wantFHIRError(t, resp, err, 400, "Sites must be an array of {name, domain[]}", "")
	if p := readDoc(t, "Project", project); p["meta"].(map[string]any)["author"] != nil {
		t.Errorf("a refused replacement wrote the project: %v", p)
	}
}

func TestReplaceList(t *testing.T) {
	project := fixtureProject(t, map[string]any{"description": "kept"})
	by := adminOf(project)
	set := func(t *testing.T, h bus.Handler, body string) (*bus.Response, error) {
		t.Helper()
		return call(t, h, request(by, map[string]string{"projectId": project}, "application/json", body))
	}
	// lists is the project's secret and site lists and description, as stored.
	lists := func(t *testing.T) string {
		t.Helper()
		p := readDoc(t, "Project", project)
		b, _ := json.Marshal(map[string]any{"secret": p["secret"], "site": p["site"], "description": p["description"]})
		return string(b)
	}

	steps := []struct {
		name string
		h    bus.Handler
		body string
		want string
	}{
		{"secrets", stack.svc.setSecrets, `[{"name":"key","valueString":"v"},{"name":"big","valueDecimal":1.50}]`,
			`{"description":"kept","secret":[{"name":"key","valueString":"v"},{"name":"big","valueDecimal":1.50}],"site":null}`},
		{"sites, the secrets kept", stack.svc.setSites, `[{"name":"main","domain":["a.example","b.example"]}]`,
			`{"description":"kept","secret":[{"name":"key","valueString":"v"},{"name":"big","valueDecimal":1.50}],"site":[{"domain":["a.example","b.example"],"name":"main"}]}`},
		{"secrets replaced, not merged", stack.svc.setSecrets, `[{"name":"n","valueInteger":7}]`,
			`{"description":"kept","secret":[{"name":"n","valueInteger":7}],"site":[{"domain":["a.example","b.example"],"name":"main"}]}`},
		{"no secrets", stack.svc.setSecrets, ` [] `,
			`{"description":"kept","secret":null,"site":[{"domain":["a.example","b.example"],"name":"main"}]}`},
		{"no sites", stack.svc.setSites, `[]`, `{"description":"kept","secret":null,"site":null}`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			resp, err := set(t, st.h, st.body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 {
				t.Fatalf("%d %s", resp.Status, resp.Body)
			}
			if got := lists(t); got != st.want {
				t.Errorf("stored %s\nwant   %s", got, st.want)
			}
			answered := decode(t, string(resp.Body))
			if author, _ := refOf(answered["meta"].(map[string]any)["author"]); author != by.Profile {
				t.Errorf("author %q, want %q", author, by.Profile)
			}
			if answered["meta"].(map[string]any)["versionId"] != readDoc(t, "Project", project)["meta"].(map[string]any)["versionId"] {
				t.Errorf("the answer is not the stored version")
			}
		})
	}
}

// A write of the project between the read and the write of a replacement
// is not lost: the replacement is made again on top of it, up to four
// attempts in all.
func TestReplaceListRetries(t *testing.T) {
	const secret = `[{"name":"key","valueString":"v"}]`
	cases := []struct {
		name         string
		interference int
		status       int
		description  string
	}{
		{"one other write", 1, 200, "written by another process before attempt 1"},
		{"three other writes", 3, 200, "written by another process before attempt 3"},
		{"four other writes", 4, 412, "written by another process before attempt 4"},
	}
	for _, tc := range cases {
		for name, h := range map[string]bus.Handler{"secrets": stack.svc.setSecrets, "sites": stack.svc.setSites} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				project := fixtureProject(t, nil)
				body, field := secret, "secret"
				if name == "sites" {
					body, field = `[{"domain":["v.example"],"name":"key"}]`, "site"
				}
				readDoc(t, "Project", project) // cached: the other writes are news to the repository
				stack.store.interfere(t, project, tc.interference)
				resp, err := call(t, h, request(adminOf(project), map[string]string{"projectId": project}, "application/json", body))
				if tc.status == 200 && err != nil {
					t.Fatal(err)
				}
				if tc.status != 200 {
					wantFHIRError(t, resp, err, tc.status, "Precondition Failed", "")
				}
				if got, want := stack.store.writesSeen(), min(tc.interference+1, 4); got != want {
					t.Errorf("%d attempts, want %d", got, want)
				}
				p := readDoc(t, "Project", project)
				if p["description"] != tc.description {
					t.Errorf("description %q, want %q", p["description"], tc.description)
				}
				want := "null"
				if tc.status == 200 {
					want = body
				}
				if got, _ := json.Marshal(p[field]); string(got) != want {
					t.Errorf("%s %s, want %s", field, got, want)
				}
			})
		}
	}
}
