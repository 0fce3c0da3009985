package infra

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lifecycle records how Run drove it.
type lifecycle struct {
	startErr, stopErr error
	started, stopped  bool
	stopDeadline      time.Duration
}

func (l *lifecycle) Start(context.Context) error { l.started = true; return l.startErr }
func (l *lifecycle) Stop(ctx context.Context) error {
	l.stopped = true
	if d, ok := ctx.Deadline(); ok {
		l.stopDeadline = time.Until(d)
	}
	return l.stopErr
}

func TestRun(t *testing.T) {
	cases := []struct {
		name              string
		startErr, stopErr error
		wantStopped       bool
	}{
		{"served, then stopped", nil, nil, true},
		{"a failed start is not stopped", errors.New("no bus"), nil, false},
		{"a failed stop is told", nil, errors.New("not drained"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // ended at once: Run goes straight to stopping
			l := &lifecycle{startErr: tc.startErr, stopErr: tc.stopErr}
			err := Run(ctx, l)
			want := tc.stopErr
			if tc.startErr != nil {
				want = tc.startErr
			}
			if !errors.Is(err, want) {
				t.Fatalf("Run: %v, want %v", err, want)
			}
			if !l.started || l.stopped != tc.wantStopped {
				t.Fatalf("started %v, stopped %v", l.started, l.stopped)
			}
			// Stop has its own deadline, not the ended context's.
			if tc.wantStopped && (l.stopDeadline <= StopTimeout-time.Second || l.stopDeadline > StopTimeout) {
				t.Fatalf("stop deadline in %s, want about %s", l.stopDeadline, StopTimeout)
			}
		})
	}
}
