package fhir

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDropEmpty checks each case of Medplum's rule: empty properties go at
// any depth, objects they empty go too, literal empty array items stay for
// the validator to refuse.
func TestDropEmpty(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty string", `{"resourceType":"Bot","name":"b","description":""}`, `{"name":"b","resourceType":"Bot"}`},
		{"null, {} and []", `{"a":null,"b":{},"c":[],"d":1}`, `{"d":1}`},
		{"falsy values stay", `{"a":false,"b":0,"c":" "}`, `{"a":false,"b":0,"c":" "}`},
		{"emptied object", `{"maritalStatus":{"text":"","coding":[]},"x":1}`, `{"x":1}`},
		{"emptied array item", `{"telecom":[{"value":""},{"value":"1"}]}`, `{"telecom":[{"value":"1"}]}`},
		{"every item emptied", `{"telecom":[{"value":""},{"system":null}],"x":1}`, `{"x":1}`},
		{"literal items stay", `{"given":["",null],"identifier":[{}]}`, `{"given":["",null],"identifier":[{}]}`},
		{"deep", `{"contained":[{"resourceType":"Patient","name":[{"given":[],"family":"f","period":{"start":""}}]}]}`,
			`{"contained":[{"name":[{"family":"f"}],"resourceType":"Patient"}]}`},
		{"nothing to drop", `{"resourceType":"Patient","name":[{"given":["a"]}]}`, `{"name":[{"given":["a"]}],"resourceType":"Patient"}`},
	} {
		var res map[string]any
		if err := json.Unmarshal([]byte(c.in), &res); err != nil {
			t.Fatal(err)
		}
		DropEmpty(res)
		got, _ := json.Marshal(res)
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

// TestDropEmptyDepth checks that nesting past the bound is left alone,
// not walked: the validator refuses it.
func TestDropEmptyDepth(t *testing.T) {
	n := 100_000
	doc := strings.Repeat(`{"a":`, n) + `""` + strings.Repeat(`}`, n)
	var res map[string]any
	d := json.NewDecoder(strings.NewReader(doc))
	if err := d.Decode(&res); err != nil {
		// encoding/json refuses this depth itself; build it by hand.
		res = map[string]any{}
		cur := res
		for range n {
			next := map[string]any{}
			cur["a"] = next
			cur = next
		}
		cur["a"] = ""
	}
	DropEmpty(res)
	if len(res) != 1 {
		t.Fatalf("the deep object was walked to its end and dropped")
	}
}
