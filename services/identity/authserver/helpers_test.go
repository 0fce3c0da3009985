package authserver

import (
	"testing"

	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

const testBase = testkit.Base

func expectOutcome(t *testing.T, err error, status int, text, expr string) {
	t.Helper()
	testkit.Outcome(t, err, status, text, expr)
}
