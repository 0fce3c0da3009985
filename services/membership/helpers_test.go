package membership

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// decode parses JSON as the handlers do (numbers stay json.Number).
func decode(t *testing.T, js string) map[string]any {
	t.Helper()
	m, err := fhir.Decode([]byte(js))
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	return m
}

// wantError checks that err is a *fhir.Error with one issue of this status,
// text and expression ("" for none).
func wantError(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want a *fhir.Error %d %q", err, err, status, text)
	}
	if fe.Status != status {
		t.Errorf("status %d, want %d (%s)", fe.Status, status, fe)
	}
	if len(fe.Outcome.Issue) != 1 {
		t.Fatalf("%d issues, want 1: %+v", len(fe.Outcome.Issue), fe.Outcome.Issue)
	}
	if got := fe.Message(); got != text {
		t.Errorf("text %q, want %q", got, text)
	}
	var want []string
	if expr != "" {
		want = []string{expr}
	}
	if got := fe.Outcome.Issue[0].Expression; !slices.Equal(got, want) {
		t.Errorf("expression %q, want %q", got, want)
	}
}

// issueLines renders issues as "expression: text", checking on the way that
// each is an invalid-input error naming at most one field.
func issueLines(t *testing.T, issues []fhir.Issue) []string {
	t.Helper()
	var out []string
	for _, i := range issues {
		if i.Severity != "error" || i.Code != "invalid" || i.Details == nil || len(i.Expression) > 1 {
			t.Errorf("malformed issue: %+v", i)
			continue
		}
		out = append(out, strings.Join(i.Expression, "")+": "+i.Details.Text)
	}
	return out
}

func wantLines(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("issues:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
