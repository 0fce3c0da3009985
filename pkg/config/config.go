// Package config reads Pinion's settings from PINION_* environment
// variables. Every variable, its default and its meaning is in Vars — the
// one table the README mirrors (a test keeps them in step).
package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Var is one setting.
type Var struct {
	Name    string
	Default string
	Doc     string
}

// Vars lists every setting with its default.
var Vars = []Var{
	{"PINION_ADDR", "127.0.0.1:8103", "HTTP address of the gateway."},
	{"PINION_BASE_URL", "", "Public base URL: token issuer, links in e-mails and Bundles. Unset: http://<PINION_ADDR>/, with localhost for a loopback or wildcard host (http://localhost:8103/ by default)."},
	{"PINION_APP_BASE_URL", "http://localhost:3000/", "Address of the web app (Medplum's app pointed at Pinion): browsers on its origin may call the API (CORS), as Medplum's appBaseUrl allows."},
	{"PINION_ALLOWED_ORIGINS", "", "More origins whose browser apps may call the API (CORS), comma-separated (https://app.example.com); * allows any origin."},
	{"PINION_DATA_DIR", "./data", "Standalone: where the embedded store and NATS keep their files, and superadmin.json. One process per directory."},
	{"PINION_STORE", "sqlite", "Standalone: sqlite (the embedded store, <data>/pinion.db) or ferretdb (an embedded FerretDB, the MongoDB wire protocol, for separate service processes on one machine); PINION_MONGODB_URI overrides both."},
	{"PINION_SQLITE_SYNC", "full", "When an acknowledged write reaches the disk: full (fsync at each commit: survives power loss), normal (survives a crash of Pinion, not of the machine) or off."},
	{"PINION_SUPERADMIN_CLIENT_ID", "", "Super-admin client id; generated on first start when empty."},
	{"PINION_SUPERADMIN_CLIENT_SECRET", "", "Super-admin client secret (at least 32 characters); generated when empty."},
	{"PINION_MONGODB_URI", "", "External MongoDB (a replica set); when set, no store is embedded."},
	{"PINION_MONGODB_DATABASE", "pinion", "Database name."},
	{"PINION_NATS_URL", "", "External NATS with JetStream; when set, NATS is not embedded."},
	{"PINION_NATS_REPLICAS", "1", "How many NATS servers keep each JetStream stream and key-value bucket (1 to 5; 3 on a three-server cluster). An existing one with fewer is brought up to it at start."},
	{"PINION_NATS_LISTEN", "", "Standalone: also expose the embedded NATS on this address (for separate service processes), with a password per process in <data>/nats-users.json; in-process only when empty."},
	{"PINION_NATS_CLUSTER_LISTEN", "", "Standalone, with PINION_NATS_LISTEN: a loopback address where the embedded NATS takes routes from the other servers of a cluster on this machine (tests and trials; a cluster across machines runs nats-server, see docs/deployment.md)."},
	{"PINION_NATS_ROUTES", "", "With PINION_NATS_CLUSTER_LISTEN: the other servers' cluster addresses, comma-separated. Every server of the cluster shares one nats-users.json (copy it into each data directory)."},
	{"PINION_FERRETDB_POSTGRESQL_URL", "", "Run the embedded FerretDB on this PostgreSQL server instead of SQLite."},
	{"PINION_FERRETDB_LISTEN", "", "Standalone: a TCP address for the embedded FerretDB (no password: any local user can connect); a Unix socket in the data directory when empty."},
	{"PINION_SMTP_URL", "", "SMTP server for invitation e-mails (smtp://user:pass@host:port); empty writes .eml files under the data directory."},
	{"PINION_AUTH_RATE_LIMIT", "160", "Requests per minute per client address on /auth and /oauth2; 0 turns the limit off."},
	{"PINION_TRUSTED_PROXIES", "", "Addresses or CIDR ranges of reverse proxies (an ingress) whose X-Forwarded-For names the client; the TCP peer is the client when empty."},
	{"PINION_MAX_BODY_BYTES", "8388608", "Largest request body accepted (413 above)."},
	{"PINION_REQUEST_TIMEOUT", "30s", "How long the gateway waits for a service before answering 504."},
	{"PINION_ADMIN_ADDR", "", "Admin HTTP address of this process (/metrics for Prometheus, /livez); off when empty."},
	{"PINION_ACCESS_TOKEN_LIFETIME", "1h", "Lifetime of access tokens."},
	{"PINION_CLIENT_SECRET_GRACE", "24h", "How long a client secret keeps working after $rotate-secret replaced it."},
	{"PINION_BOT_WORKERS", "2", "Worker processes that run bots (a bot that crashes its worker fails only the runs in it)."},
	{"PINION_BOT_WORKER_MEMORY", "2147483648", "Address space, in bytes, each bot worker process may use beyond what the Go runtime reserves."},
	{"PINION_BOT_PROJECT_CONCURRENCY", "8", "Bots one project may run at once per botexec instance; more wait up to 10 s, then 429."},
	{"PINION_EGRESS_ALLOW_PRIVATE", "false", "true lets every member-written URL Pinion reaches (subscriptions' rest-hooks, client key sets, external identity providers and their key sets, Google's keys) be on loopback, link-local and private addresses; refused by default, so a member cannot reach into the network Pinion runs in."},
	{"PINION_REST_HOOK_ALLOW_PRIVATE", "", "The earlier name of PINION_EGRESS_ALLOW_PRIVATE, still read when that is unset; setting both to different values is refused."},
	{"PINION_REGISTER_ENABLED", "true", "Whether people may create their own accounts (/auth/newuser, as Medplum's registerEnabled); false refuses every registration."},
	{"PINION_RECAPTCHA_SITE_KEY", "", "The server's reCAPTCHA site key (Medplum's recaptchaSiteKey): a registration naming another site key is verified with the secret key of the Project.site that has it."},
	{"PINION_RECAPTCHA_SECRET_KEY", "", "reCAPTCHA secret key; when set, /auth/newuser needs a recaptchaToken the verification URL accepts (Medplum's recaptchaSecretKey)."},
	{"PINION_RECAPTCHA_VERIFY_URL", "https://www.google.com/recaptcha/api/siteverify", "Where reCAPTCHA tokens are verified (another provider's siteverify-compatible URL, or a local one in tests)."},
	{"PINION_PASSWORD_BREACH_URL", "", "A k-anonymity range API new passwords are also checked against, the hash prefix appended (Have I Been Pwned's: https://api.pwnedpasswords.com/range/); empty checks only the list shipped with Pinion. An unreachable service lets the password through."},
	{"PINION_GOOGLE_CLIENT_ID", "", "The server's Google client id (Medplum's googleClientId): POST /auth/google takes Google ID tokens for it, and for the googleClientId of a Project.site."},
	{"PINION_GOOGLE_JWKS_URL", "https://www.googleapis.com/oauth2/v3/certs", "Google's signing keys, which Google ID tokens are checked against (a local key set in tests)."},
	{"PINION_LOG_LEVEL", "info", "debug, info, warn or error."},
	{"PINION_LOG_FORMAT", "text", "text or json."},
}

// Config is the parsed settings.
type Config struct {
	Addr    string
	BaseURL string
	// BaseURLDerived: PINION_BASE_URL was not set, BaseURL comes from the
	// address (and follows the port the listener got, for port 0).
	BaseURLDerived      bool
	AppBaseURL          string
	AllowedOrigins      []string
	DataDir             string
	SuperAdminClientID  string
	SuperAdminSecret    string
	Store               string
	SQLiteSync          string
	MongoURI            string
	MongoDatabase       string
	NATSURL             string
	NATSListen          string
	NATSReplicas        int
	NATSClusterListen   string
	NATSRoutes          []string
	FerretPostgreSQLURL string
	FerretListen        string
	SMTPURL             string
	AdminAddr           string
	AuthRateLimit       int
	TrustedProxies      []netip.Prefix
	MaxBodyBytes        int
	RequestTimeout      time.Duration
	AccessTokenLifetime time.Duration
	ClientSecretGrace   time.Duration
	BotWorkers          int
	BotWorkerMemory     int64
	BotProjectRuns      int
	// EgressPrivate lets outbound requests to member-written URLs reach
	// private addresses (PINION_EGRESS_ALLOW_PRIVATE).
	EgressPrivate bool
	// RegisterDisabled is PINION_REGISTER_ENABLED=false: the zero value
	// lets people register, as Medplum's default does.
	RegisterDisabled bool
	// RecaptchaSecretKey, when set, makes registration verify a reCAPTCHA
	// token at RecaptchaVerifyURL.
	RecaptchaSecretKey string
	RecaptchaVerifyURL string
	// RecaptchaSiteKey is the server's own site key; any other a
	// registration names is a project site's.
	RecaptchaSiteKey string
	// GoogleClientID and GoogleJWKSURL: Google Sign-In (/auth/google).
	GoogleClientID string
	GoogleJWKSURL  string
	LogLevel       string
	LogFormat      string
	// PasswordBreachURL, when set, is a range API passwords are checked
	// against beside the shipped list (auth.BreachRange).
	PasswordBreachURL string
}

// Load reads the environment; any invalid setting is an error naming it.
func Load() (*Config, error) { return LoadFrom(os.Getenv) }

// LoadFrom reads settings through get (os.Getenv, or a map in tests).
func LoadFrom(get func(string) string) (*Config, error) {
	v := func(name string) string {
		if s := get(name); s != "" {
			return s
		}
		for _, d := range Vars {
			if d.Name == name {
				return d.Default
			}
		}
		panic("config: undeclared variable " + name)
	}
	c := &Config{
		Addr:                v("PINION_ADDR"),
		BaseURL:             v("PINION_BASE_URL"),
		AppBaseURL:          v("PINION_APP_BASE_URL"),
		DataDir:             v("PINION_DATA_DIR"),
		SuperAdminClientID:  v("PINION_SUPERADMIN_CLIENT_ID"),
		SuperAdminSecret:    v("PINION_SUPERADMIN_CLIENT_SECRET"),
		Store:               v("PINION_STORE"),
		SQLiteSync:          v("PINION_SQLITE_SYNC"),
		MongoURI:            v("PINION_MONGODB_URI"),
		MongoDatabase:       v("PINION_MONGODB_DATABASE"),
		NATSURL:             v("PINION_NATS_URL"),
		NATSListen:          v("PINION_NATS_LISTEN"),
		NATSClusterListen:   v("PINION_NATS_CLUSTER_LISTEN"),
		FerretPostgreSQLURL: v("PINION_FERRETDB_POSTGRESQL_URL"),
		FerretListen:        v("PINION_FERRETDB_LISTEN"),
		SMTPURL:             v("PINION_SMTP_URL"),
		AdminAddr:           v("PINION_ADMIN_ADDR"),
		LogLevel:            v("PINION_LOG_LEVEL"),
		LogFormat:           v("PINION_LOG_FORMAT"),
	}
	var err error
	if _, _, err = net.SplitHostPort(c.Addr); err != nil {
		return nil, fmt.Errorf("PINION_ADDR: %q is not host:port", c.Addr)
	}
	if c.BaseURL == "" {
		c.BaseURL, c.BaseURLDerived = DeriveBaseURL(c.Addr), true
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("PINION_BASE_URL: %q is not an http(s) URL", c.BaseURL)
	}
	if !strings.HasSuffix(c.BaseURL, "/") {
		c.BaseURL += "/"
	}
	if u, err := url.Parse(c.AppBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("PINION_APP_BASE_URL: %q is not an http(s) URL", c.AppBaseURL)
	}
	for _, o := range strings.Split(v("PINION_ALLOWED_ORIGINS"), ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if u, err := url.Parse(o); o != "*" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/")) {
			return nil, fmt.Errorf("PINION_ALLOWED_ORIGINS: %q is not an origin (https://host[:port]) or *", o)
		}
		c.AllowedOrigins = append(c.AllowedOrigins, o)
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return nil, fmt.Errorf("PINION_ADMIN_ADDR: %q is not host:port", c.AdminAddr)
		}
	}
	if c.Store != "sqlite" && c.Store != "ferretdb" {
		return nil, fmt.Errorf("PINION_STORE: want sqlite or ferretdb")
	}
	if c.SQLiteSync != "full" && c.SQLiteSync != "normal" && c.SQLiteSync != "off" {
		return nil, fmt.Errorf("PINION_SQLITE_SYNC: want full, normal or off")
	}
	if (c.SuperAdminClientID == "") != (c.SuperAdminSecret == "") {
		return nil, fmt.Errorf("PINION_SUPERADMIN_CLIENT_ID and PINION_SUPERADMIN_CLIENT_SECRET must be set together")
	}
	if c.SuperAdminSecret != "" && len(c.SuperAdminSecret) < 32 {
		return nil, fmt.Errorf("PINION_SUPERADMIN_CLIENT_SECRET: must be at least 32 characters")
	}
	if c.SuperAdminClientID != "" && !validID(c.SuperAdminClientID) {
		return nil, fmt.Errorf("PINION_SUPERADMIN_CLIENT_ID: must be 1-64 characters of A-Z, a-z, 0-9, '-' and '.'")
	}
	if c.AuthRateLimit, err = strconv.Atoi(v("PINION_AUTH_RATE_LIMIT")); err != nil || c.AuthRateLimit < 0 {
		return nil, fmt.Errorf("PINION_AUTH_RATE_LIMIT: want a number >= 0")
	}
	if c.TrustedProxies, err = ParsePrefixes(v("PINION_TRUSTED_PROXIES")); err != nil {
		return nil, fmt.Errorf("PINION_TRUSTED_PROXIES: want addresses or CIDR ranges separated by commas: %v", err)
	}
	if c.MaxBodyBytes, err = strconv.Atoi(v("PINION_MAX_BODY_BYTES")); err != nil || c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 64<<20 {
		return nil, fmt.Errorf("PINION_MAX_BODY_BYTES: want a number between 1024 and 67108864")
	}
	if c.RequestTimeout, err = time.ParseDuration(v("PINION_REQUEST_TIMEOUT")); err != nil || c.RequestTimeout <= 0 {
		return nil, fmt.Errorf("PINION_REQUEST_TIMEOUT: want a positive duration such as 30s")
	}
	if c.AccessTokenLifetime, err = time.ParseDuration(v("PINION_ACCESS_TOKEN_LIFETIME")); err != nil || c.AccessTokenLifetime < 10*time.Minute || c.AccessTokenLifetime > 24*time.Hour {
		// Medplum's client refreshes 5 minutes before expiry: a shorter
		// lifetime makes it refresh without end.
		return nil, fmt.Errorf("PINION_ACCESS_TOKEN_LIFETIME: want a duration between 10m and 24h")
	}
	if c.ClientSecretGrace, err = time.ParseDuration(v("PINION_CLIENT_SECRET_GRACE")); err != nil || c.ClientSecretGrace < time.Second || c.ClientSecretGrace > 30*24*time.Hour {
		return nil, fmt.Errorf("PINION_CLIENT_SECRET_GRACE: want a duration between 1s and 720h")
	}
	if c.BotWorkers, err = strconv.Atoi(v("PINION_BOT_WORKERS")); err != nil || c.BotWorkers < 1 || c.BotWorkers > 64 {
		return nil, fmt.Errorf("PINION_BOT_WORKERS: want a number between 1 and 64")
	}
	if c.BotWorkerMemory, err = strconv.ParseInt(v("PINION_BOT_WORKER_MEMORY"), 10, 64); err != nil || c.BotWorkerMemory < 256<<20 {
		return nil, fmt.Errorf("PINION_BOT_WORKER_MEMORY: want a number of bytes, at least 268435456 (256 MiB)")
	}
	if c.BotProjectRuns, err = strconv.Atoi(v("PINION_BOT_PROJECT_CONCURRENCY")); err != nil || c.BotProjectRuns < 1 {
		return nil, fmt.Errorf("PINION_BOT_PROJECT_CONCURRENCY: want a number >= 1")
	}
	if c.NATSReplicas, err = strconv.Atoi(v("PINION_NATS_REPLICAS")); err != nil || c.NATSReplicas < 1 || c.NATSReplicas > 5 {
		return nil, fmt.Errorf("PINION_NATS_REPLICAS: want a number between 1 and 5")
	}
	if err := c.loadCluster(v("PINION_NATS_ROUTES")); err != nil {
		return nil, err
	}
	if c.EgressPrivate, err = egressPrivate(get); err != nil {
		return nil, err
	}
	if on, err := strconv.ParseBool(v("PINION_REGISTER_ENABLED")); err != nil {
		return nil, fmt.Errorf("PINION_REGISTER_ENABLED: want true or false")
	} else {
		c.RegisterDisabled = !on
	}
	c.GoogleClientID = v("PINION_GOOGLE_CLIENT_ID")
	c.GoogleJWKSURL = v("PINION_GOOGLE_JWKS_URL")
	if u, err := url.Parse(c.GoogleJWKSURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("PINION_GOOGLE_JWKS_URL: %q is not an http(s) URL", c.GoogleJWKSURL)
	}
	c.RecaptchaSecretKey = v("PINION_RECAPTCHA_SECRET_KEY")
	c.RecaptchaSiteKey = v("PINION_RECAPTCHA_SITE_KEY")
	c.RecaptchaVerifyURL = v("PINION_RECAPTCHA_VERIFY_URL")
	if u, err := url.Parse(c.RecaptchaVerifyURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("PINION_RECAPTCHA_VERIFY_URL: %q is not an http(s) URL", c.RecaptchaVerifyURL)
	}
	if c.PasswordBreachURL = v("PINION_PASSWORD_BREACH_URL"); c.PasswordBreachURL != "" {
		if u, err := url.Parse(c.PasswordBreachURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("PINION_PASSWORD_BREACH_URL: %q is not an http(s) URL", c.PasswordBreachURL)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("PINION_LOG_LEVEL: want debug, info, warn or error")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return nil, fmt.Errorf("PINION_LOG_FORMAT: want text or json")
	}
	return c, nil
}

// loadCluster checks the embedded cluster's settings. Routes carry a
// password but no TLS, so the embedded server clusters on loopback only:
// a cluster across machines is nats-server's job, with its own TLS.
func (c *Config) loadCluster(routes string) error {
	for _, r := range strings.Split(routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			c.NATSRoutes = append(c.NATSRoutes, r)
		}
	}
	if c.NATSClusterListen == "" {
		if len(c.NATSRoutes) > 0 {
			return fmt.Errorf("PINION_NATS_ROUTES: needs PINION_NATS_CLUSTER_LISTEN")
		}
		return nil
	}
	if c.NATSListen == "" {
		return fmt.Errorf("PINION_NATS_CLUSTER_LISTEN: needs PINION_NATS_LISTEN (a cluster's servers take separate processes' connections)")
	}
	for _, a := range append([]string{c.NATSClusterListen}, c.NATSRoutes...) {
		host, _, err := net.SplitHostPort(a)
		ip, perr := netip.ParseAddr(host)
		if err != nil || (perr != nil && host != "localhost") || (perr == nil && !ip.IsLoopback()) {
			return fmt.Errorf("PINION_NATS_CLUSTER_LISTEN and PINION_NATS_ROUTES: %q is not a loopback host:port (the embedded cluster is for one machine)", a)
		}
	}
	return nil
}

// ParsePrefixes reads a comma-separated list of addresses and CIDR ranges.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Logger builds the structured logger the settings ask for.
func (c *Config) Logger() *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

// DeriveBaseURL is the base URL of a gateway listening on addr, when none
// is configured: http://host:port/, with localhost for a loopback or
// wildcard host, which is what a browser on this machine uses.
func DeriveBaseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	switch host {
	case "", "0.0.0.0", "::", "127.0.0.1", "::1", "localhost":
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// egressPrivate reads PINION_EGRESS_ALLOW_PRIVATE, or its earlier name
// PINION_REST_HOOK_ALLOW_PRIVATE, which named only rest-hooks although the
// one egress client has always served every outbound URL.
func egressPrivate(get func(string) string) (bool, error) {
	read := func(name string) (*bool, error) {
		s := get(name)
		if s == "" {
			return nil, nil
		}
		on, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%s: want true or false", name)
		}
		return &on, nil
	}
	now, err := read("PINION_EGRESS_ALLOW_PRIVATE")
	if err != nil {
		return false, err
	}
	old, err := read("PINION_REST_HOOK_ALLOW_PRIVATE")
	if err != nil {
		return false, err
	}
	switch {
	case now != nil && old != nil && *now != *old:
		return false, fmt.Errorf("PINION_EGRESS_ALLOW_PRIVATE and PINION_REST_HOOK_ALLOW_PRIVATE (its earlier name) disagree: set only PINION_EGRESS_ALLOW_PRIVATE")
	case now != nil:
		return *now, nil
	case old != nil:
		return *old, nil
	}
	return false, nil
}
