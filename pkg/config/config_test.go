package config

import (
	"flag"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the README's settings table from Vars")

// The README's settings table is Vars, row for row: a setting's name,
// default and meaning are declared once, in settings. -update rewrites the
// table.
func TestREADMEListsEveryVariable(t *testing.T) {
	const path = "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	const head = "| Variable | Default | Meaning |\n|---|---|---|\n"
	start := strings.Index(readme, head)
	if start < 0 {
		t.Fatalf("README has no settings table headed %q", head)
	}
	start += len(head)
	end := start + strings.Index(readme[start:], "\n\n") + 1 // the blank line after the table
	var rows []string
	for _, v := range Vars {
		def := "(empty)"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		rows = append(rows, "| `"+v.Name+"` | "+def+" | "+v.Doc+" |")
	}
	want := strings.Join(rows, "\n") + "\n"
	if readme[start:end] == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(readme[:start]+want+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have := strings.Split(readme[start:end], "\n")
	for _, r := range rows {
		if !slices.Contains(have, r) {
			t.Errorf("README lacks\n%s", r)
		}
	}
	for _, r := range have {
		if r != "" && !slices.Contains(rows, r) {
			t.Errorf("README has, not in Vars,\n%s", r)
		}
	}
	t.Errorf("README's settings table differs from Vars (order too): go test ./pkg/config -run README -update rewrites it")
}

// Every kind of bad value is refused with a one-line reason naming the
// variable: the process prints it and exits.
func TestLoadRefusesBadSettings(t *testing.T) {
	secret := strings.Repeat("x", 32)
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		// Text with a check.
		{"bad addr", map[string]string{"PINION_ADDR": "8103"}, `PINION_ADDR: "8103" is not host:port`},
		{"bad admin addr", map[string]string{"PINION_ADDR": "127.0.0.1:8103", "PINION_ADMIN_ADDR": "9090"}, `PINION_ADMIN_ADDR: "9090" is not host:port`},
		{"bad base", map[string]string{"PINION_BASE_URL": "ftp://x"}, `PINION_BASE_URL: "ftp://x" is not an http(s) URL`},
		{"bad app base", map[string]string{"PINION_APP_BASE_URL": "localhost:3000"}, `PINION_APP_BASE_URL: "localhost:3000" is not an http(s) URL`},
		{"bad jwks url", map[string]string{"PINION_GOOGLE_JWKS_URL": "www.googleapis.com/oauth2/v3/certs"}, `PINION_GOOGLE_JWKS_URL: "www.googleapis.com/oauth2/v3/certs" is not an http(s) URL`},
		{"bad recaptcha url", map[string]string{"PINION_RECAPTCHA_VERIFY_URL": "ftp://x/"}, `PINION_RECAPTCHA_VERIFY_URL: "ftp://x/" is not an http(s) URL`},
		{"bad breach url", map[string]string{"PINION_PASSWORD_BREACH_URL": "api.pwnedpasswords.com/range/"}, `PINION_PASSWORD_BREACH_URL: "api.pwnedpasswords.com/range/" is not an http(s) URL`},
		{"short secret", map[string]string{"PINION_SUPERADMIN_CLIENT_ID": "a", "PINION_SUPERADMIN_CLIENT_SECRET": "short"}, `PINION_SUPERADMIN_CLIENT_SECRET: must be at least 32 characters`},
		{"bad id", map[string]string{"PINION_SUPERADMIN_CLIENT_ID": "a/b", "PINION_SUPERADMIN_CLIENT_SECRET": secret}, `PINION_SUPERADMIN_CLIENT_ID: must be 1-64 characters of A-Z, a-z, 0-9, '-' and '.'`},
		// One of a few words.
		{"bad store", map[string]string{"PINION_STORE": "postgres"}, `PINION_STORE: want sqlite or ferretdb`},
		{"bad sync", map[string]string{"PINION_SQLITE_SYNC": "sometimes"}, `PINION_SQLITE_SYNC: want full, normal or off`},
		{"bad log level", map[string]string{"PINION_LOG_LEVEL": "loud"}, `PINION_LOG_LEVEL: want debug, info, warn or error`},
		{"bad log format", map[string]string{"PINION_LOG_FORMAT": "xml"}, `PINION_LOG_FORMAT: want text or json`},
		// Lists.
		{"origin with path", map[string]string{"PINION_ALLOWED_ORIGINS": "https://app.example.com/x"}, `PINION_ALLOWED_ORIGINS: "https://app.example.com/x" is not an origin (https://host[:port]) or *`},
		{"bad origin", map[string]string{"PINION_ALLOWED_ORIGINS": "*, app.example.com"}, `PINION_ALLOWED_ORIGINS: "app.example.com" is not an origin (https://host[:port]) or *`},
		{"bad proxies", map[string]string{"PINION_TRUSTED_PROXIES": "10.0.0.0/8, ingress"}, `PINION_TRUSTED_PROXIES: want addresses or CIDR ranges separated by commas: ParseAddr("ingress"): unable to parse IP`},
		// Numbers: not one, and out of range.
		{"rate not a number", map[string]string{"PINION_AUTH_RATE_LIMIT": "many"}, `PINION_AUTH_RATE_LIMIT: want a number >= 0`},
		{"bad rate", map[string]string{"PINION_AUTH_RATE_LIMIT": "-1"}, `PINION_AUTH_RATE_LIMIT: want a number >= 0`},
		{"tiny body limit", map[string]string{"PINION_MAX_BODY_BYTES": "10"}, `PINION_MAX_BODY_BYTES: want a number between 1024 and 67108864`},
		{"huge body limit", map[string]string{"PINION_MAX_BODY_BYTES": "67108865"}, `PINION_MAX_BODY_BYTES: want a number between 1024 and 67108864`},
		{"no bot workers", map[string]string{"PINION_BOT_WORKERS": "0"}, `PINION_BOT_WORKERS: want a number between 1 and 64`},
		{"fractional workers", map[string]string{"PINION_BOT_WORKERS": "1.5"}, `PINION_BOT_WORKERS: want a number between 1 and 64`},
		{"tiny workers", map[string]string{"PINION_BOT_WORKER_MEMORY": "1000"}, `PINION_BOT_WORKER_MEMORY: want a number of bytes, at least 268435456 (256 MiB)`},
		{"worker memory in GiB", map[string]string{"PINION_BOT_WORKER_MEMORY": "2GiB"}, `PINION_BOT_WORKER_MEMORY: want a number of bytes, at least 268435456 (256 MiB)`},
		{"no bot runs", map[string]string{"PINION_BOT_PROJECT_CONCURRENCY": "0"}, `PINION_BOT_PROJECT_CONCURRENCY: want a number >= 1`},
		{"six replicas", map[string]string{"PINION_NATS_REPLICAS": "6"}, `PINION_NATS_REPLICAS: want a number between 1 and 5`},
		// Durations: not one, and out of range.
		{"bad timeout", map[string]string{"PINION_REQUEST_TIMEOUT": "soon"}, `PINION_REQUEST_TIMEOUT: want a positive duration such as 30s`},
		{"negative timeout", map[string]string{"PINION_REQUEST_TIMEOUT": "-1s"}, `PINION_REQUEST_TIMEOUT: want a positive duration such as 30s`},
		{"token lifetime without unit", map[string]string{"PINION_ACCESS_TOKEN_LIFETIME": "3600"}, `PINION_ACCESS_TOKEN_LIFETIME: want a duration between 10m and 24h`},
		{"short tokens", map[string]string{"PINION_ACCESS_TOKEN_LIFETIME": "5m"}, `PINION_ACCESS_TOKEN_LIFETIME: want a duration between 10m and 24h`},
		{"no grace", map[string]string{"PINION_CLIENT_SECRET_GRACE": "0s"}, `PINION_CLIENT_SECRET_GRACE: want a duration between 1s and 720h`},
		{"month of grace", map[string]string{"PINION_CLIENT_SECRET_GRACE": "1000h"}, `PINION_CLIENT_SECRET_GRACE: want a duration between 1s and 720h`},
		{"retention in days", map[string]string{"PINION_AUDIT_RETENTION": "365d"}, `PINION_AUDIT_RETENTION: want a duration between 24h and 876600h`},
		{"retention of an hour", map[string]string{"PINION_AUDIT_RETENTION": "1h"}, `PINION_AUDIT_RETENTION: want a duration between 24h and 876600h`},
		// Booleans.
		{"bad register", map[string]string{"PINION_REGISTER_ENABLED": "sometimes"}, `PINION_REGISTER_ENABLED: want true or false`},
		{"bad egress", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "yes please"}, `PINION_EGRESS_ALLOW_PRIVATE: want true or false`},
		{"bad legacy egress", map[string]string{"PINION_REST_HOOK_ALLOW_PRIVATE": "yes"}, `PINION_REST_HOOK_ALLOW_PRIVATE: want true or false`},
		// Rules across settings.
		{"id without key", map[string]string{"PINION_SUPERADMIN_CLIENT_ID": "a"}, `PINION_SUPERADMIN_CLIENT_ID and PINION_SUPERADMIN_CLIENT_SECRET must be set together`},
		{"key without id", map[string]string{"PINION_SUPERADMIN_CLIENT_SECRET": secret}, `PINION_SUPERADMIN_CLIENT_ID and PINION_SUPERADMIN_CLIENT_SECRET must be set together`},
		{"egress names disagree", map[string]string{"PINION_EGRESS_ALLOW_PRIVATE": "false", "PINION_REST_HOOK_ALLOW_PRIVATE": "true"}, `PINION_EGRESS_ALLOW_PRIVATE and PINION_REST_HOOK_ALLOW_PRIVATE (its earlier name) disagree: set only PINION_EGRESS_ALLOW_PRIVATE`},
		{"routes alone", map[string]string{"PINION_NATS_ROUTES": "127.0.0.1:6222"}, `PINION_NATS_ROUTES: needs PINION_NATS_CLUSTER_LISTEN`},
		{"cluster alone", map[string]string{"PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222"}, `PINION_NATS_CLUSTER_LISTEN: needs PINION_NATS_LISTEN (a cluster's servers take separate processes' connections)`},
		{"public cluster", map[string]string{"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "0.0.0.0:6222"}, `PINION_NATS_CLUSTER_LISTEN and PINION_NATS_ROUTES: "0.0.0.0:6222" is not a loopback host:port (the embedded cluster is for one machine)`},
		{"syslog not host:port", map[string]string{"PINION_AUDIT_SYSLOG_ADDR": "siem.example.com"}, `PINION_AUDIT_SYSLOG_ADDR: "siem.example.com" is not host:port`},
		{"syslog CA alone", map[string]string{"PINION_AUDIT_SYSLOG_CA": "/etc/siem/ca.pem"}, `PINION_AUDIT_SYSLOG_CA: needs PINION_AUDIT_SYSLOG_ADDR`},
		{"syslog key alone", map[string]string{"PINION_AUDIT_SYSLOG_KEY": "/etc/siem/key.pem"}, `PINION_AUDIT_SYSLOG_KEY: needs PINION_AUDIT_SYSLOG_ADDR`},
		{"syslog cert without key", map[string]string{"PINION_AUDIT_SYSLOG_ADDR": "siem.example.com:6514", "PINION_AUDIT_SYSLOG_CERT": "/etc/siem/cert.pem"}, `PINION_AUDIT_SYSLOG_CERT and PINION_AUDIT_SYSLOG_KEY must be set together`},
		{"webhook over http", map[string]string{"PINION_AUDIT_WEBHOOK_URL": "http://siem.example.com/in", "PINION_AUDIT_WEBHOOK_SECRET": secret}, `PINION_AUDIT_WEBHOOK_URL: "http://siem.example.com/in" is not an https:// URL`},
		{"webhook without secret", map[string]string{"PINION_AUDIT_WEBHOOK_URL": "https://siem.example.com/in"}, `PINION_AUDIT_WEBHOOK_URL: needs PINION_AUDIT_WEBHOOK_SECRET (its deliveries are signed)`},
		{"webhook short secret", map[string]string{"PINION_AUDIT_WEBHOOK_URL": "https://siem.example.com/in", "PINION_AUDIT_WEBHOOK_SECRET": "short"}, `PINION_AUDIT_WEBHOOK_SECRET: must be at least 32 characters`},
		{"webhook secret alone", map[string]string{"PINION_AUDIT_WEBHOOK_SECRET": secret}, `PINION_AUDIT_WEBHOOK_SECRET: needs PINION_AUDIT_WEBHOOK_URL`},
		{"webhook CA alone", map[string]string{"PINION_AUDIT_WEBHOOK_CA": "/etc/siem/ca.pem"}, `PINION_AUDIT_WEBHOOK_CA: needs PINION_AUDIT_WEBHOOK_URL`},
		{"remote route", map[string]string{"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222", "PINION_NATS_ROUTES": "10.0.0.2:6222"}, `PINION_NATS_CLUSTER_LISTEN and PINION_NATS_ROUTES: "10.0.0.2:6222" is not a loopback host:port (the embedded cluster is for one machine)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFrom(func(k string) string { return tc.env[k] })
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n%s\nwant\n%s", err, tc.want)
			}
		})
	}
}

// Unset, every setting takes its default; set, each kind is read.
func TestLoadReadsSettings(t *testing.T) {
	c, err := LoadFrom(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defaults := &Config{
		Addr: "127.0.0.1:8103", BaseURL: "http://localhost:8103/", BaseURLDerived: true,
		AppBaseURL: "http://localhost:3000/", DataDir: "./data", Store: "sqlite", SQLiteSync: "full",
		MongoDatabase: "pinion", NATSReplicas: 1, AuthRateLimit: 160, MaxBodyBytes: 8 << 20,
		RequestTimeout: 30 * time.Second, AccessTokenLifetime: time.Hour, ClientSecretGrace: 24 * time.Hour,
		BotWorkers: 2, BotWorkerMemory: 2 << 30, BotProjectRuns: 8,
		RecaptchaVerifyURL: "https://www.google.com/recaptcha/api/siteverify",
		GoogleJWKSURL:      "https://www.googleapis.com/oauth2/v3/certs",
		LogLevel:           "info", LogFormat: "text",
	}
	if !reflect.DeepEqual(c, defaults) {
		t.Errorf("defaults:\n%+v\nwant\n%+v", c, defaults)
	}

	env := map[string]string{
		"PINION_ADDR": "0.0.0.0:9000", "PINION_BASE_URL": "https://pinion.example.com/api",
		"PINION_ALLOWED_ORIGINS":      " https://a.example.com, ,http://b.example.com:8080/ ,*",
		"PINION_SUPERADMIN_CLIENT_ID": "admin-1.x", "PINION_SUPERADMIN_CLIENT_SECRET": strings.Repeat("s", 32),
		"PINION_STORE": "ferretdb", "PINION_SQLITE_SYNC": "off", "PINION_ADMIN_ADDR": ":9090",
		"PINION_AUTH_RATE_LIMIT": "0", "PINION_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1, ::ffff:198.51.100.7",
		"PINION_MAX_BODY_BYTES": "67108864", "PINION_REQUEST_TIMEOUT": "1m30s",
		"PINION_ACCESS_TOKEN_LIFETIME": "10m", "PINION_CLIENT_SECRET_GRACE": "720h",
		"PINION_BOT_WORKERS": "64", "PINION_BOT_WORKER_MEMORY": "268435456", "PINION_BOT_PROJECT_CONCURRENCY": "1",
		"PINION_NATS_REPLICAS": "5", "PINION_EGRESS_ALLOW_PRIVATE": "1", "PINION_REGISTER_ENABLED": "FALSE",
		"PINION_PASSWORD_BREACH_URL": "https://api.pwnedpasswords.com/range/",
		"PINION_LOG_LEVEL":           "debug", "PINION_LOG_FORMAT": "json",
		"PINION_AUDIT_SYSLOG_ADDR": "siem.example.com:6514", "PINION_AUDIT_SYSLOG_CA": "/etc/siem/ca.pem",
		"PINION_AUDIT_SYSLOG_CERT": "/etc/siem/cert.pem", "PINION_AUDIT_SYSLOG_KEY": "/etc/siem/key.pem",
		"PINION_AUDIT_WEBHOOK_URL": "https://siem.example.com/in", "PINION_AUDIT_WEBHOOK_SECRET": strings.Repeat("w", 32),
		"PINION_AUDIT_WEBHOOK_CA": "/etc/siem/webhook-ca.pem",
	}
	c, err = LoadFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := *defaults
	want.Addr, want.BaseURL, want.BaseURLDerived = "0.0.0.0:9000", "https://pinion.example.com/api/", false
	want.AllowedOrigins = []string{"https://a.example.com", "http://b.example.com:8080/", "*"}
	want.SuperAdminClientID, want.SuperAdminSecret = "admin-1.x", strings.Repeat("s", 32)
	want.Store, want.SQLiteSync, want.AdminAddr = "ferretdb", "off", ":9090"
	want.AuthRateLimit = 0
	want.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("198.51.100.7/32")}
	want.MaxBodyBytes, want.RequestTimeout = 64<<20, 90*time.Second
	want.AccessTokenLifetime, want.ClientSecretGrace = 10*time.Minute, 720*time.Hour
	want.BotWorkers, want.BotWorkerMemory, want.BotProjectRuns, want.NATSReplicas = 64, 256<<20, 1, 5
	want.EgressPrivate, want.RegisterDisabled = true, true
	want.PasswordBreachURL = "https://api.pwnedpasswords.com/range/"
	want.LogLevel, want.LogFormat = "debug", "json"
	want.AuditSyslogAddr, want.AuditSyslogCA = "siem.example.com:6514", "/etc/siem/ca.pem"
	want.AuditSyslogCert, want.AuditSyslogKey = "/etc/siem/cert.pem", "/etc/siem/key.pem"
	want.AuditWebhookURL, want.AuditWebhookSecret, want.AuditWebhookCA = "https://siem.example.com/in", strings.Repeat("w", 32), "/etc/siem/webhook-ca.pem"
	if !reflect.DeepEqual(c, &want) {
		t.Errorf("set:\n%+v\nwant\n%+v", c, &want)
	}

	cluster := map[string]string{"PINION_NATS_LISTEN": "127.0.0.1:4222", "PINION_NATS_CLUSTER_LISTEN": "127.0.0.1:6222", "PINION_NATS_ROUTES": "127.0.0.1:6223, [::1]:6224"}
	if c, err := LoadFrom(func(k string) string { return cluster[k] }); err != nil || len(c.NATSRoutes) != 2 || c.NATSRoutes[1] != "[::1]:6224" {
		t.Fatalf("loopback cluster: %+v %v", c, err)
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

// Each variable is declared once, documented, and its default is a value
// it accepts (TestLoadReadsSettings loads them all).
func TestSettingsDeclaredOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range Vars {
		if seen[v.Name] {
			t.Errorf("%s declared twice", v.Name)
		}
		seen[v.Name] = true
		if !strings.HasPrefix(v.Name, "PINION_") || v.Doc == "" {
			t.Errorf("%s: want a PINION_ name and a meaning", v.Name)
		}
	}
}
