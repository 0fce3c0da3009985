package criteria

import "testing"

func TestParse(t *testing.T) {
	ps := Params{"patient": "Patient/123", "ab": "X"}
	cases := []struct {
		in, key, want, unresolved string
		err                       bool
	}{
		{in: "Patient?_id=%patient.id", key: "_id", want: "123"},
		{in: "Observation?subject=%patient", key: "subject", want: "Patient/123"},
		{in: "Observation?subject=Patient/%patient.id", key: "subject", want: "Patient/123"},
		{in: "Patient?name=J%C3%A9r%C3%B4me", key: "name", want: "Jérôme"},
		{in: "Patient?name=%ab", key: "name", want: "X"}, // a known name wins over a hex escape
		{in: "Patient?name=%other", key: "name", want: "%other", unresolved: "%other"},
		{in: "Patient?name=100%", err: true},
		{in: "?name=x", err: true},
		{in: "Patient?name=%patient.identifier", key: "name", want: "Patient/123.identifier"},
	}
	for _, tc := range cases {
		c, err := Parse(tc.in, ps)
		if tc.err {
			if err == nil {
				t.Errorf("%s: no error", tc.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := c.Query.Get(tc.key); got != tc.want || c.Unresolved != tc.unresolved {
			t.Errorf("%s: %s=%q unresolved %q, want %q %q", tc.in, tc.key, got, c.Unresolved, tc.want, tc.unresolved)
		}
	}
	// A value cannot add a parameter: '&' inside a substituted value stays in it.
	c, err := Parse("Patient?family=%x", Params{"x": "a&_id=b"})
	if err != nil || len(c.Query) != 1 || c.Query.Get("family") != "a&_id=b" {
		t.Errorf("value added parameters: %v %v", c.Query, err)
	}
}

func TestParseText(t *testing.T) {
	ps := Params{"patient": "Patient/123", "odd": "a&b"}
	for _, tc := range []struct{ in, want string }{
		{"Patient?_id=%patient.id", "Patient?_id=123"},
		{"Observation?subject=%patient&status=final", "Observation?subject=Patient/123&status=final"},
		{"Patient?name=%odd", "Patient?name=a%26b"},
		{"Patient?name=%other", "Patient?name=%25other"},
		{"Patient", "Patient"},
	} {
		c, err := Parse(tc.in, ps)
		if err != nil || c.Text != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.in, c.Text, err, tc.want)
		}
	}
}
