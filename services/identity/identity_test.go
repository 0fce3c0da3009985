package identity

import (
	"testing"
	"time"
)

func TestNewDefaults(t *testing.T) {
	cases := []struct {
		name            string
		in              Config
		lifetime, grace time.Duration
	}{
		{"unset", Config{}, time.Hour, 24 * time.Hour},
		{"set", Config{TokenLifetime: 5 * time.Minute, SecretGrace: time.Hour}, 5 * time.Minute, time.Hour},
		{"a negative grace", Config{SecretGrace: -time.Second}, time.Hour, 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.in, nil, nil, nil, nil, nil)
			if s.cfg.TokenLifetime != tc.lifetime || s.cfg.SecretGrace != tc.grace {
				t.Fatalf("lifetime %v grace %v, want %v %v", s.cfg.TokenLifetime, s.cfg.SecretGrace, tc.lifetime, tc.grace)
			}
			if s.limiter == nil || s.oauth == nil || s.log == nil {
				t.Fatal("a part is missing")
			}
		})
	}
}
