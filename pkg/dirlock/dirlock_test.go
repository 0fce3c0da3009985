package dirlock

import (
	"testing"
	"time"
)

func TestHeldErrorMessage(t *testing.T) {
	started := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		err  HeldError
		want string
	}{
		{
			HeldError{Dir: "./data", PID: 1234, Host: "x", Started: started, Cmd: "pinion"},
			"data directory ./data is in use by pinion (pid 1234 on host x, since 2026-11-23T10:00:00Z); stop it first or choose another PINION_DATA_DIR",
		},
		{
			HeldError{Dir: "./data"},
			"data directory ./data is in use by another process; stop it first or choose another PINION_DATA_DIR",
		},
		{
			HeldError{Dir: "/srv/d", PID: 7},
			"data directory /srv/d is in use by another process (pid 7); stop it first or choose another PINION_DATA_DIR",
		},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() =\n  %s\nwant\n  %s", got, tc.want)
		}
	}
}
