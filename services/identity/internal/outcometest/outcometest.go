// Package outcometest reads the OperationOutcomes of refused requests, for
// the tests of every identity package (testkit opens the whole service, so
// the packages it is built from cannot use it).
package outcometest

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Issues lists a 400's issues as "expression: text", in order, for
// comparison; nil for no error. Each must be an error of code invalid.
func Issues(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	fe := fhir.AsError(err)
	if fe.Status != 400 {
		t.Fatalf("status %d, want 400: %v", fe.Status, err)
	}
	var out []string
	for _, i := range fe.Outcome.Issue {
		if i.Severity != "error" || i.Code != "invalid" || i.Details == nil {
			t.Fatalf("issue %+v", i)
		}
		out = append(out, strings.Join(i.Expression, ",")+": "+i.Details.Text)
	}
	return out
}
