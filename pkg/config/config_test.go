package config

import (
	"os"
	"strings"
	"testing"
)

// The README's configuration table must list every variable with its default.
func TestREADMEListsEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, v := range Vars {
		def := "(empty)"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		if !strings.Contains(readme, "| `"+v.Name+"` | "+def+" |") {
			t.Errorf("README lacks %s with default %s", v.Name, def)
		}
	}
}

func TestLoadRefusesBadSettings(t *testing.T) {
	cases := map[string]map[string]string{
		"short secret":     {"PINION_SUPERADMIN_CLIENT_ID": "a", "PINION_SUPERADMIN_CLIENT_SECRET": "short"},
		"id without key":   {"PINION_SUPERADMIN_CLIENT_ID": "a"},
		"bad id":           {"PINION_SUPERADMIN_CLIENT_ID": "a/b", "PINION_SUPERADMIN_CLIENT_SECRET": strings.Repeat("x", 32)},
		"bad addr":         {"PINION_ADDR": "8103"},
		"bad base":         {"PINION_BASE_URL": "ftp://x"},
		"bad app base":     {"PINION_APP_BASE_URL": "localhost:3000"},
		"origin with path": {"PINION_ALLOWED_ORIGINS": "https://app.example.com/x"},
		"bad origin":       {"PINION_ALLOWED_ORIGINS": "app.example.com"},
		"bad rate":         {"PINION_AUTH_RATE_LIMIT": "-1"},
		"bad timeout":      {"PINION_REQUEST_TIMEOUT": "soon"},
		"bad log level":    {"PINION_LOG_LEVEL": "loud"},
		"tiny body limit":  {"PINION_MAX_BODY_BYTES": "10"},
		"short tokens":     {"PINION_ACCESS_TOKEN_LIFETIME": "5m"},
		"no grace":         {"PINION_CLIENT_SECRET_GRACE": "0s"},
		"month of grace":   {"PINION_CLIENT_SECRET_GRACE": "1000h"},
		"no bot workers":   {"PINION_BOT_WORKERS": "0"},
		"tiny workers":     {"PINION_BOT_WORKER_MEMORY": "1000"},
		"no bot runs":      {"PINION_BOT_PROJECT_CONCURRENCY": "0"},
		"bad breach url":   {"PINION_PASSWORD_BREACH_URL": "api.pwnedpasswords.com/range/"},
		"bad proxies":      {"PINION_TRUSTED_PROXIES": "10.0.0.0/8, ingress"},
		"routes alone":     {"PINION_NATS_ROUTES": "127.0.0.1:6222"},
		"cluster alone":    {"PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222"},
		"public cluster":   {"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "0.0.0.0:6222"},
		"remote route":     {"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222", "PINION_NATS_ROUTES": "10.0.0.2:6222"},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := LoadFrom(func(k string) string { return env[k] }); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	cluster := map[string]string{"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222", "PINION_NATS_ROUTES": "127.0.0.1:6223, [::1]:6224"}
	if c, err := LoadFrom(func(k string) string { return cluster[k] }); err != nil || len(c.NATSRoutes) != 2 || c.NATSRoutes[1] != "[::1]:6224" {
		t.Fatalf("loopback cluster: %+v %v", c, err)
	}
	c, err := LoadFrom(func(string) string { return "" })
	if err != nil || c.Addr != "127.0.0.1:8103" || c.BaseURL != "http://localhost:8103/" || c.AuthRateLimit != 160 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// An unset base URL follows PINION_ADDR, so a changed port does not leave
// links pointing at 8103; a set one is kept.
func TestBaseURLFollowsAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9000":   "http://localhost:9000/",
		"0.0.0.0:8103":     "http://localhost:8103/",
		":8080":            "http://localhost:8080/",
		"[::1]:9000":       "http://localhost:9000/",
		"192.0.2.7:8103":   "http://192.0.2.7:8103/",
		"[2001:db8::1]:80": "http://[2001:db8::1]:80/",
	} {
		c, err := LoadFrom(func(k string) string { return map[string]string{"PINION_ADDR": addr}[k] })
		if err != nil || c.BaseURL != want || !c.BaseURLDerived {
			t.Errorf("%s: %q %v, want %q", addr, c.BaseURL, err, want)
		}
	}
	env := map[string]string{"PINION_ADDR": "127.0.0.1:9000", "PINION_BASE_URL": "https://pinion.example.com"}
	c, err := LoadFrom(func(k string) string { return env[k] })
	if err != nil || c.BaseURL != "https://pinion.example.com/" || c.BaseURLDerived {
		t.Errorf("set base URL: %q %v", c.BaseURL, err)
	}
}

// PINION_EGRESS_ALLOW_PRIVATE is the setting; its earlier name still
// works alone, and the two may not disagree.
func TestEgressPrivateAlias(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want bool
		bad  bool
	}{
		{"default", nil, false, false},
		{"new name", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "true"}, true, false},
		{"old name", map[string]string{"PINION_REST_HOOK_ALLOW_PRIVATE": "true"}, true, false},
		{"both agree", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "true", "PINION_REST_HOOK_ALLOW_PRIVATE": "true"}, true, false},
		{"both disagree", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "false", "PINION_REST_HOOK_ALLOW_PRIVATE": "true"}, false, true},
		{"not a boolean", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "yes please"}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFrom(func(k string) string { return tc.env[k] })
			if tc.bad {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil || c.EgressPrivate != tc.want {
				t.Fatalf("EgressPrivate = %v, %v; want %v", c != nil && c.EgressPrivate, err, tc.want)
			}
		})
	}
}
