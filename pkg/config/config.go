// Package config reads Pinion's settings from PINION_* environment
// variables.
//
// Every setting is declared once, in settings: its name, default, meaning,
// kind (text, one of some words, a number, a duration, a boolean, a list)
// and check, and the field of Config it fills. LoadFrom reads the
// environment through that table, then applies the few rules that join
// settings. Vars, the table without its fields, is the README's settings
// table, row for row (a test holds them equal and can rewrite the
// README's), and what deploy/checks holds the deployments' variables to.
//
// To add a setting:
//
//  1. declare it here: a field in Config and a line in settings, made
//     with the constructor of its kind (text, oneOf, integer, duration,
//     boolean, list...), which checks it; a rule that joins it to another
//     setting goes in LoadFrom, after the loop;
//  2. write its row in the README's settings table, which is Vars to the
//     letter: go test ./pkg/config -run README -update;
//  3. read it in the FromConfig of the service that uses it (the gateway's
//     and botexec's NewConfig), into the service's own Config when New
//     needs it.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Var is one setting, as documented.
type Var struct {
	Name    string
	Default string
	Doc     string
}

// Vars lists every setting with its default and meaning, in the README's
// order: the declarations in settings, without the fields they fill.
var Vars = func() []Var {
	var vs []Var
	for _, s := range settings(&Config{}, &raw{}) {
		vs = append(vs, Var{s.name, s.def, s.doc})
	}
	return vs
}()

// settings declares every setting, in the README's order, each bound to
// the field of c it fills, or of r for the two that LoadFrom's rules turn
// into fields.
func settings(c *Config, r *raw) []setting {
	return []setting{
		text("PINION_ADDR", "127.0.0.1:8103",
			"HTTP address of the gateway.",
			&c.Addr, hostPort),
		text("PINION_BASE_URL", "", // derived from PINION_ADDR when unset, then checked: LoadFrom
			"Public base URL: token issuer, links in e-mails and Bundles. Unset: http://<PINION_ADDR>/, with localhost for a loopback or wildcard host (http://localhost:8103/ by default).",
			&c.BaseURL),
		text("PINION_APP_BASE_URL", "http://localhost:3000/",
			"Address of the web app (Medplum's app pointed at Pinion): browsers on its origin may call the API (CORS), as Medplum's appBaseUrl allows.",
			&c.AppBaseURL, httpURL),
		list("PINION_ALLOWED_ORIGINS", "",
			"More origins whose browser apps may call the API (CORS), comma-separated (`https://app.example.com`); `*` allows any origin.",
			&c.AllowedOrigins, origin),
		text("PINION_DATA_DIR", "./data",
			"Standalone: where the embedded store and NATS keep their files, and superadmin.json. One process per directory. Leave room beside the database for its write-ahead log (`pinion.db-wal`): under a sustained heavy write load it reaches some hundreds of MiB (1 GiB at most), and keeps that length until Pinion stops.",
			&c.DataDir),
		oneOf("PINION_STORE", "sqlite",
			"Standalone: sqlite (the embedded store, <data>/pinion.db) or ferretdb (an embedded FerretDB, the MongoDB wire protocol, for separate service processes on one machine); PINION_MONGODB_URI overrides both.",
			&c.Store, "sqlite", "ferretdb"),
		oneOf("PINION_SQLITE_SYNC", "full",
			"When an acknowledged write reaches the disk: full (acknowledged only once fsynced: survives power loss; access-granting writes are unreadable until then too), normal (survives a crash of Pinion, not of the machine) or off.",
			&c.SQLiteSync, "full", "normal", "off"),
		text("PINION_SUPERADMIN_CLIENT_ID", "", // set with the secret or not at all: LoadFrom
			"Super-admin client id; generated on first start when empty.",
			&c.SuperAdminClientID, clientID),
		text("PINION_SUPERADMIN_CLIENT_SECRET", "",
			"Super-admin client secret (at least 32 characters); generated when empty.",
			&c.SuperAdminSecret, longSecret),
		text("PINION_MONGODB_URI", "",
			"External MongoDB (a replica set); when set, no store is embedded.",
			&c.MongoURI),
		text("PINION_MONGODB_DATABASE", "pinion",
			"Database name.",
			&c.MongoDatabase),
		text("PINION_NATS_URL", "",
			"External NATS with JetStream; when set, NATS is not embedded.",
			&c.NATSURL),
		integer("PINION_NATS_REPLICAS", "1",
			"How many NATS servers keep each JetStream stream and key-value bucket (1 to 5; 3 on a three-server cluster). An existing one with fewer is brought up to it at start.",
			&c.NATSReplicas, 1, 5),
		text("PINION_NATS_LISTEN", "",
			"Standalone: also expose the embedded NATS on this address (for separate service processes), with a password per process in <data>/nats-users.json; in-process only when empty.",
			&c.NATSListen),
		text("PINION_NATS_CLUSTER_LISTEN", "", // checked with the routes: checkCluster
			"Standalone, with PINION_NATS_LISTEN: a loopback address where the embedded NATS takes routes from the other servers of a cluster on this machine (tests and trials; a cluster across machines runs nats-server, see docs/deployment.md).",
			&c.NATSClusterListen),
		list("PINION_NATS_ROUTES", "",
			"With PINION_NATS_CLUSTER_LISTEN: the other servers' cluster addresses, comma-separated. Every server of the cluster shares one nats-users.json (copy it into each data directory).",
			&c.NATSRoutes),
		text("PINION_FERRETDB_POSTGRESQL_URL", "",
			"Run the embedded FerretDB on this PostgreSQL server instead of SQLite.",
			&c.FerretPostgreSQLURL),
		text("PINION_FERRETDB_LISTEN", "",
			"Standalone: a TCP address for the embedded FerretDB (no password: any local user can connect); a Unix socket in the data directory when empty.",
			&c.FerretListen),
		text("PINION_SMTP_URL", "", // checked by pkg/mail, where the membership service opens it
			"SMTP server for invitation e-mails (smtp://user:pass@host:port); empty writes .eml files under the data directory.",
			&c.SMTPURL),
		integer("PINION_AUTH_RATE_LIMIT", "160",
			"Requests per minute per client address on /auth and /oauth2; 0 turns the limit off.",
			&c.AuthRateLimit, 0, unbounded),
		prefixes("PINION_TRUSTED_PROXIES", "",
			"Addresses or CIDR ranges of reverse proxies (an ingress) whose X-Forwarded-For names the client; the TCP peer is the client when empty.",
			&c.TrustedProxies),
		integer("PINION_MAX_BODY_BYTES", "8388608",
			"Largest request body accepted (413 above).",
			&c.MaxBodyBytes, 1024, 64<<20),
		positiveDuration("PINION_REQUEST_TIMEOUT", "30s",
			"How long the gateway waits for a service before answering 504.",
			&c.RequestTimeout),
		text("PINION_ADMIN_ADDR", "",
			"Admin HTTP address of this process (/metrics for Prometheus, /livez); off when empty.",
			&c.AdminAddr, hostPort),
		text("PINION_AUDIT_SYSLOG_ADDR", "", // joined to its TLS files: checkAuditSinks
			"A syslog receiver (host:port, usually 6514) the audit trail streams to as it is written: RFC 5424 over TLS, octet-counted (docs/audit.md); off when empty.",
			&c.AuditSyslogAddr, hostPort),
		text("PINION_AUDIT_SYSLOG_CA", "",
			"PEM file of the CA certificates the syslog receiver's certificate is checked against; the system's when empty.",
			&c.AuditSyslogCA),
		text("PINION_AUDIT_SYSLOG_CERT", "",
			"PEM file of a client certificate to present to the syslog receiver, with PINION_AUDIT_SYSLOG_KEY.",
			&c.AuditSyslogCert),
		text("PINION_AUDIT_SYSLOG_KEY", "",
			"PEM file of that client certificate's private key.",
			&c.AuditSyslogKey),
		text("PINION_AUDIT_WEBHOOK_URL", "", // needs its secret: checkAuditSinks
			"An https:// endpoint the audit trail streams to as it is written: signed NDJSON batches of AuditEvents (docs/audit.md); off when empty.",
			&c.AuditWebhookURL, httpsURL),
		text("PINION_AUDIT_WEBHOOK_SECRET", "",
			"Keys the audit webhook's signature (X-Pinion-Signature, HMAC-SHA256); at least 32 characters, and needed with PINION_AUDIT_WEBHOOK_URL.",
			&c.AuditWebhookSecret, longSecret),
		text("PINION_AUDIT_WEBHOOK_CA", "",
			"PEM file of the CA certificates the audit webhook's certificate is checked against; the system's when empty.",
			&c.AuditWebhookCA),
		duration("PINION_AUDIT_RETENTION", "",
			"How long the audit trail keeps events, as hours (`2190h`, about three months; `8760h`, a year); at least 24h. Each project's events recorded longer ago are removed from the store, the oldest first, and the removal recorded in the trail (docs/audit.md). Kept forever when empty.",
			&c.AuditRetention, 24*time.Hour, 100*8766*time.Hour),
		// At least 10m: Medplum's client refreshes 5 minutes before
		// expiry, so a shorter lifetime makes it refresh without end.
		duration("PINION_ACCESS_TOKEN_LIFETIME", "1h",
			"Lifetime of access tokens.",
			&c.AccessTokenLifetime, 10*time.Minute, 24*time.Hour),
		duration("PINION_CLIENT_SECRET_GRACE", "24h",
			"How long a client secret keeps working after $rotate-secret replaced it.",
			&c.ClientSecretGrace, time.Second, 30*24*time.Hour),
		integer("PINION_BOT_WORKERS", "2",
			"Worker processes that run bots (a bot that crashes its worker fails only the runs in it).",
			&c.BotWorkers, 1, 64),
		byteCount("PINION_BOT_WORKER_MEMORY", "2147483648",
			"Address space, in bytes, each bot worker process may use beyond what the Go runtime reserves.",
			&c.BotWorkerMemory, 256<<20),
		integer("PINION_BOT_PROJECT_CONCURRENCY", "8",
			"Bots one project may run at once per botexec instance; more wait up to 10 s, then 429.",
			&c.BotProjectRuns, 1, unbounded),
		boolean("PINION_EGRESS_ALLOW_PRIVATE", "false",
			"true lets every member-written URL Pinion reaches (subscriptions' rest-hooks, client key sets, external identity providers and their key sets, Google's keys) be on loopback, link-local and private addresses; refused by default, so a member cannot reach into the network Pinion runs in.",
			&c.EgressPrivate),
		boolean("PINION_REST_HOOK_ALLOW_PRIVATE", "", // into EgressPrivate: LoadFrom
			"The earlier name of PINION_EGRESS_ALLOW_PRIVATE, still read when that is unset; setting both to different values is refused.",
			&r.restHookPrivate),
		boolean("PINION_REGISTER_ENABLED", "true", // RegisterDisabled is its negation: LoadFrom
			"Whether people may create their own accounts (/auth/newuser, as Medplum's registerEnabled); false refuses every registration.",
			&r.registerEnabled),
		text("PINION_RECAPTCHA_SITE_KEY", "",
			"The server's reCAPTCHA site key (Medplum's recaptchaSiteKey): a registration naming another site key is verified with the secret key of the Project.site that has it.",
			&c.RecaptchaSiteKey),
		text("PINION_RECAPTCHA_SECRET_KEY", "",
			"reCAPTCHA secret key; when set, /auth/newuser needs a recaptchaToken the verification URL accepts (Medplum's recaptchaSecretKey).",
			&c.RecaptchaSecretKey),
		text("PINION_RECAPTCHA_VERIFY_URL", "https://www.google.com/recaptcha/api/siteverify",
			"Where reCAPTCHA tokens are verified (another provider's siteverify-compatible URL, or a local one in tests).",
			&c.RecaptchaVerifyURL, httpURL),
		text("PINION_PASSWORD_BREACH_URL", "",
			"A k-anonymity range API new passwords are also checked against, the hash prefix appended (Have I Been Pwned's: https://api.pwnedpasswords.com/range/); empty checks only the list shipped with Pinion. An unreachable service lets the password through.",
			&c.PasswordBreachURL, httpURL),
		text("PINION_GOOGLE_CLIENT_ID", "",
			"The server's Google client id (Medplum's googleClientId): POST /auth/google takes Google ID tokens for it, and for the googleClientId of a Project.site.",
			&c.GoogleClientID),
		text("PINION_GOOGLE_JWKS_URL", "https://www.googleapis.com/oauth2/v3/certs",
			"Google's signing keys, which Google ID tokens are checked against (a local key set in tests).",
			&c.GoogleJWKSURL, httpURL),
		oneOf("PINION_LOG_LEVEL", "info",
			"debug, info, warn or error.",
			&c.LogLevel, "debug", "info", "warn", "error"),
		oneOf("PINION_LOG_FORMAT", "text",
			"text or json.",
			&c.LogFormat, "text", "json"),
	}
}

// raw holds what two settings read before LoadFrom's rules turn it into
// fields of Config.
type raw struct {
	restHookPrivate bool // PINION_REST_HOOK_ALLOW_PRIVATE, when set
	registerEnabled bool // PINION_REGISTER_ENABLED
}

// Config is the parsed settings, each field filled by its declaration in
// settings or, for the few that join settings, by LoadFrom's rules.
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
	// The audit trail's sinks (pkg/auditsink): a syslog receiver, with
	// the files of its TLS settings, and a webhook; each off when empty.
	AuditSyslogAddr    string
	AuditSyslogCA      string
	AuditSyslogCert    string
	AuditSyslogKey     string
	AuditWebhookURL    string
	AuditWebhookSecret string
	AuditWebhookCA     string
	// AuditRetention is how long the audit trail keeps events; forever
	// when zero.
	AuditRetention time.Duration
}

// Load reads the environment; any invalid setting is an error naming it.
func Load() (*Config, error) { return LoadFrom(os.Getenv) }

// LoadFrom reads settings through get (os.Getenv, or a map in tests): each
// in turn through its declaration, then the rules that join settings.
func LoadFrom(get func(string) string) (*Config, error) {
	c, r := &Config{}, &raw{}
	for _, s := range settings(c, r) {
		v := get(s.name)
		if v == "" {
			v = s.def
		}
		if v == "" {
			continue // unset, with no default: the field stays zero
		}
		if err := s.set(v); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}

	// Unset, the base URL is the gateway's own address (BaseURLDerived:
	// standalone follows the port its listener gets, for port 0). Either
	// way it must be an http(s) URL, and ends in a slash.
	if c.BaseURL == "" {
		c.BaseURL, c.BaseURLDerived = DeriveBaseURL(c.Addr), true
	}
	if err := httpURL(c.BaseURL); err != nil {
		return nil, fmt.Errorf("PINION_BASE_URL: %w", err)
	}
	if !strings.HasSuffix(c.BaseURL, "/") {
		c.BaseURL += "/"
	}
	// The super admin's credentials are both chosen or both generated.
	if (c.SuperAdminClientID == "") != (c.SuperAdminSecret == "") {
		return nil, errors.New("PINION_SUPERADMIN_CLIENT_ID and PINION_SUPERADMIN_CLIENT_SECRET must be set together")
	}
	if err := c.checkCluster(); err != nil {
		return nil, err
	}
	if err := c.checkAuditSinks(); err != nil {
		return nil, err
	}
	// PINION_REST_HOOK_ALLOW_PRIVATE is PINION_EGRESS_ALLOW_PRIVATE's
	// earlier name, which named only rest-hooks although the one egress
	// client has always served every outbound URL. It counts when the new
	// name is unset; the two set may not disagree.
	if get("PINION_REST_HOOK_ALLOW_PRIVATE") != "" {
		if get("PINION_EGRESS_ALLOW_PRIVATE") != "" && c.EgressPrivate != r.restHookPrivate {
			return nil, errors.New("PINION_EGRESS_ALLOW_PRIVATE and PINION_REST_HOOK_ALLOW_PRIVATE (its earlier name) disagree: set only PINION_EGRESS_ALLOW_PRIVATE")
		}
		c.EgressPrivate = r.restHookPrivate
	}
	// Registration is on unless refused, so that Config's zero value (in
	// tests) lets people register, as Medplum's default does.
	c.RegisterDisabled = !r.registerEnabled
	return c, nil
}

// checkCluster checks the embedded cluster's settings. Routes carry a
// password but no TLS, so the embedded server clusters on loopback only:
// a cluster across machines is nats-server's job, with its own TLS.
func (c *Config) checkCluster() error {
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

// checkAuditSinks checks that each sink's settings come with what they
// need: its TLS files with the receiver, a certificate with its key, the
// webhook with the secret that signs its deliveries.
func (c *Config) checkAuditSinks() error {
	for _, f := range []struct{ name, value string }{
		{"PINION_AUDIT_SYSLOG_CA", c.AuditSyslogCA}, {"PINION_AUDIT_SYSLOG_CERT", c.AuditSyslogCert}, {"PINION_AUDIT_SYSLOG_KEY", c.AuditSyslogKey},
	} {
		if f.value != "" && c.AuditSyslogAddr == "" {
			return fmt.Errorf("%s: needs PINION_AUDIT_SYSLOG_ADDR", f.name)
		}
	}
	if (c.AuditSyslogCert == "") != (c.AuditSyslogKey == "") {
		return errors.New("PINION_AUDIT_SYSLOG_CERT and PINION_AUDIT_SYSLOG_KEY must be set together")
	}
	for _, f := range []struct{ name, value string }{
		{"PINION_AUDIT_WEBHOOK_SECRET", c.AuditWebhookSecret}, {"PINION_AUDIT_WEBHOOK_CA", c.AuditWebhookCA},
	} {
		if f.value != "" && c.AuditWebhookURL == "" {
			return fmt.Errorf("%s: needs PINION_AUDIT_WEBHOOK_URL", f.name)
		}
	}
	if c.AuditWebhookURL != "" && c.AuditWebhookSecret == "" {
		return errors.New("PINION_AUDIT_WEBHOOK_URL: needs PINION_AUDIT_WEBHOOK_SECRET (its deliveries are signed)")
	}
	return nil
}

// A setting is one variable: its name, default and meaning, and set, which
// reads a value into the field the setting fills. set's error says what
// was wanted; LoadFrom puts the name before it. The constructors below
// make one of each kind.
type setting struct {
	name, def, doc string
	set            func(string) error
}

// text is a string, which each check (if any) accepts.
func text(name, def, doc string, p *string, checks ...func(string) error) setting {
	return setting{name, def, doc, func(s string) error {
		for _, check := range checks {
			if err := check(s); err != nil {
				return err
			}
		}
		*p = s
		return nil
	}}
}

// oneOf is one of the words given.
func oneOf(name, def, doc string, p *string, words ...string) setting {
	want := errors.New("want " + strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1])
	return setting{name, def, doc, func(s string) error {
		if !slices.Contains(words, s) {
			return want
		}
		*p = s
		return nil
	}}
}

// unbounded, as integer's hi, sets no upper bound.
const unbounded = math.MaxInt

// integer is a whole number from lo to hi.
func integer(name, def, doc string, p *int, lo, hi int) setting {
	want := fmt.Errorf("want a number between %d and %d", lo, hi)
	if hi == unbounded {
		want = fmt.Errorf("want a number >= %d", lo)
	}
	return setting{name, def, doc, func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return want
		}
		*p = n
		return nil
	}}
}

// byteCount is a number of bytes, at least least.
func byteCount(name, def, doc string, p *int64, least int64) setting {
	want := fmt.Errorf("want a number of bytes, at least %d (%d MiB)", least, least>>20)
	return setting{name, def, doc, func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < least {
			return want
		}
		*p = n
		return nil
	}}
}

// duration is a duration (time.ParseDuration's: 90s, 1h30m) from lo to hi.
func duration(name, def, doc string, p *time.Duration, lo, hi time.Duration) setting {
	want := fmt.Errorf("want a duration between %s and %s", brief(lo), brief(hi))
	return setting{name, def, doc, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d < lo || d > hi {
			return want
		}
		*p = d
		return nil
	}}
}

// positiveDuration is a duration longer than zero.
func positiveDuration(name, def, doc string, p *time.Duration) setting {
	want := fmt.Errorf("want a positive duration such as %s", def)
	return setting{name, def, doc, func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return want
		}
		*p = d
		return nil
	}}
}

// brief writes a duration as one would set it: 24h, not 24h0m0s.
func brief(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// boolean is true or false (or what else strconv.ParseBool reads: 1, 0,
// t, f, TRUE...).
func boolean(name, def, doc string, p *bool) setting {
	return setting{name, def, doc, func(s string) error {
		on, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		*p = on
		return nil
	}}
}

// list is comma-separated items, without the spaces around them and the
// empty ones, each of which each check (if any) accepts.
func list(name, def, doc string, p *[]string, checks ...func(string) error) setting {
	return setting{name, def, doc, func(s string) error {
		var items []string
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			for _, check := range checks {
				if err := check(item); err != nil {
					return err
				}
			}
			items = append(items, item)
		}
		*p = items
		return nil
	}}
}

// prefixes is comma-separated addresses and CIDR ranges (ParsePrefixes).
func prefixes(name, def, doc string, p *[]netip.Prefix) setting {
	return setting{name, def, doc, func(s string) error {
		ps, err := ParsePrefixes(s)
		if err != nil {
			return fmt.Errorf("want addresses or CIDR ranges separated by commas: %v", err)
		}
		*p = ps
		return nil
	}}
}

// hostPort checks an address to listen on.
func hostPort(s string) error {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	return nil
}

// httpURL checks an absolute http or https URL.
func httpURL(s string) error {
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

// httpsURL checks an absolute https URL.
func httpsURL(s string) error {
	if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an https:// URL", s)
	}
	return nil
}

// origin checks a browser origin (scheme, host and port), or * for any.
func origin(s string) error {
	if s == "*" {
		return nil
	}
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%q is not an origin (https://host[:port]) or *", s)
	}
	return nil
}

// clientID checks a client id the super admin may be given.
func clientID(s string) error {
	if !validID(s) {
		return errors.New("must be 1-64 characters of A-Z, a-z, 0-9, '-' and '.'")
	}
	return nil
}

// longSecret checks a client secret is long enough not to be guessed.
func longSecret(s string) error {
	if len(s) < 32 {
		return errors.New("must be at least 32 characters")
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
