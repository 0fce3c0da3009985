package fhirsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// wantError fails unless err is a *fhir.Error with the status and details
// text, and names expr in its expression ("" for none).
func wantError(t *testing.T, err error, status int, text, expr string) *fhir.Error {
	t.Helper()
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want %d %q", err, err, status, text)
	}
	if fe.Status != status || fe.Message() != text {
		t.Fatalf("error %d %q, want %d %q", fe.Status, fe.Message(), status, text)
	}
	var got []string
	if len(fe.Outcome.Issue) > 0 {
		got = fe.Outcome.Issue[0].Expression
	}
	if want := []string{expr}; expr == "" && len(got) != 0 || expr != "" && !slices.Equal(got, want) {
		t.Fatalf("expression %q, want %q", got, expr)
	}
	return fe
}

// wantNoError fails on any error.
func wantNoError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// request is a request with a Content-Type (none when ct is "") and a body.
func request(method, ct, body string) *bus.Request {
	r := &bus.Request{Method: method, Header: map[string]string{}, Body: []byte(body), Query: url.Values{}}
	if ct != "" {
		r.Header["Content-Type"] = ct
	}
	return r
}

// canon is JSON re-encoded with sorted keys and exact numbers, for
// comparing documents whatever their key order and spacing.
func canon(t *testing.T, doc []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, doc)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// sameJSON fails unless got (a document or a value to encode) equals the
// JSON document want.
func sameJSON(t *testing.T, got any, want string) {
	t.Helper()
	b, ok := got.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(got); err != nil {
			t.Fatal(err)
		}
	}
	if g, w := canon(t, b), canon(t, []byte(want)); g != w {
		t.Fatalf("got  %s\nwant %s", g, w)
	}
}

// decoded is a JSON document as generic values.
func decoded(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, doc)
	}
	return m
}
