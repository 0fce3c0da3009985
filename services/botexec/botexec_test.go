package botexec

import (
	"context"
	"testing"

	"github.com/pinion-health/pinion/pkg/config"
)

func TestNewConfig(t *testing.T) {
	c := &config.Config{BaseURL: "https://pinion.example/", BotWorkers: 3, BotWorkerMemory: 512 << 20, BotProjectRuns: 5, MaxBodyBytes: 1}
	want := Config{BaseURL: "https://pinion.example/", Workers: 3, WorkerMemoryBytes: 512 << 20, ProjectConcurrency: 5}
	if got := NewConfig(c); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}

// New wires the bounds from the settings; nothing starts until Start.
func TestNew(t *testing.T) {
	cases := []struct {
		name     string
		projects int
		want     int
	}{
		{"project bound set", 3, 3},
		{"project bound unset", 0, defaultProjectConcurrency},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{ProjectConcurrency: tc.projects}, nil, nil, nil, nil)
			if s.slots.max != tc.want || s.slots.wait != slotWait {
				t.Fatalf("project slots %d, wait %v", s.slots.max, s.slots.wait)
			}
			if cap(s.asyncSlots) != maxAsync || s.log == nil || s.policies == nil || s.identifiers == nil {
				t.Fatalf("%+v", s)
			}
			if s.pool != nil || s.audits != nil || s.svc != nil {
				t.Fatal("started by New")
			}
			// Stopping what never started has nothing to wait for.
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
