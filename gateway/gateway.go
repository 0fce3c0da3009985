// Package gateway is Pinion's only HTTP entry: it verifies bearer tokens,
// enforces body-size and rate limits, and forwards each route to the service
// that owns it over NATS request/reply.
package gateway

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/gateway/console"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/scimwire"
	"github.com/pinion-health/pinion/pkg/session"
)

// Version is reported by /healthcheck; set at build time.
var Version = "dev"

// Config is what the gateway needs to know.
type Config struct {
	Addr           string
	BaseURL        string
	MaxBodyBytes   int
	RequestTimeout time.Duration
	AuthRateLimit  int // per client address per minute; 0 = off
	// TrustedProxies may name the client in X-Forwarded-For.
	TrustedProxies Proxies
	// AppBaseURL is the web app's address: its origin may call the API
	// from a browser (cors.go), as may AllowedOrigins ("*": any).
	AppBaseURL     string
	AllowedOrigins []string
}

// NewConfig is the gateway's Config from the process's settings.
func NewConfig(c *config.Config) Config {
	return Config{
		Addr: c.Addr, BaseURL: c.BaseURL, MaxBodyBytes: c.MaxBodyBytes,
		RequestTimeout: c.RequestTimeout, AuthRateLimit: c.AuthRateLimit, TrustedProxies: c.TrustedProxies,
		AppBaseURL: c.AppBaseURL, AllowedOrigins: c.AllowedOrigins,
	}
}

// Gateway is the HTTP front door.
type Gateway struct {
	cfg      Config
	nc       *nats.Conn
	sessions *session.View
	log      *slog.Logger
	app      *fiber.App
	verifier *auth.Verifier

	keysMu      sync.RWMutex
	keys        map[string]*ecdsa.PublicKey
	keysFetched time.Time
	ready       atomic.Bool

	// tokens caches verified claims by token, so the signature is checked
	// once per token rather than once per request.
	tokens *lru.Cache[string, *auth.Claims]
	// refusals bounds which refused tokens go to the audit trail (refused.go).
	refusals *refusals

	// sockets counts open WebSocket subscription sockets (ws.go).
	sockets wsCount
}

// New builds the gateway. sessions is the watched view of logins and memberships.
func New(cfg Config, nc *nats.Conn, sessions *session.View, log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.Default()
	}
	tc, _ := lru.New[string, *auth.Claims](100_000)
	g := &Gateway{cfg: cfg, nc: nc, sessions: sessions, log: log.With("component", "gateway"), keys: map[string]*ecdsa.PublicKey{}, tokens: tc, refusals: newRefusals()}
	g.verifier = &auth.Verifier{Issuer: cfg.BaseURL, Audience: cfg.BaseURL, Keys: g.key}
	g.app = fiber.New(fiber.Config{
		// Up to bodySlack past the limit the body is read and refused with
		// a 413 (requestBody): closing on a client still sending makes
		// its kernel reset the connection, and the 413 is lost. Past
		// that, fasthttp refuses and closes at once.
		BodyLimit:             cfg.MaxBodyBytes + bodySlack,
		DisableStartupMessage: true,
		ErrorHandler:          g.onError,
		ReadTimeout:           cfg.RequestTimeout + 10*time.Second,
		IdleTimeout:           2 * time.Minute,
		// Requests carry no server state; keep the pool small and predictable.
		ReadBufferSize: 16 << 10,
	})
	g.routes()
	return g
}

func (g *Gateway) routes() {
	a := g.app
	a.Use(g.requestID)
	a.Use(g.cors())
	a.Get("/livez", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"ok": true}) })
	a.Get("/readyz", g.readyz)
	a.Get("/healthcheck", g.readyz)
	var limit fiber.Handler
	if g.cfg.AuthRateLimit > 0 {
		limit = limiter.New(limiter.Config{
			Max:               g.cfg.AuthRateLimit,
			Expiration:        time.Minute,
			KeyGenerator:      g.clientKey,
			LimiterMiddleware: limiter.SlidingWindow{},
			LimitReached: func(c *fiber.Ctx) error {
				return fhir.TooManyRequests()
			},
		})
	}
	for _, r := range bus.Routes {
		h := []fiber.Handler{}
		if r.Has(bus.SignInLimit) && limit != nil {
			h = append(h, rateLimitHeader, limit)
		}
		h = append(h, g.forward(r))
		a.Add(r.Method, r.Path, h...)
	}
	g.wsRoutes(a)
	a.Use("/console", g.consoleLog)
	console.New(console.Config{BaseURL: g.cfg.BaseURL, Timeout: g.cfg.RequestTimeout}, g.nc, g.bearer, g.awaitSession, g.clientIP, g.log.With("component", "console")).Register(a)
	a.Use(func(c *fiber.Ctx) error { return fhir.NotFound() })
}

// Listen serves HTTP on the configured address until ctx ends, then drains.
func (g *Gateway) Listen(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", g.cfg.Addr); err != nil {
			return fmt.Errorf("gateway listen %s: %w", g.cfg.Addr, err)
		}
	}
	go g.loadKeys(ctx)
	errc := make(chan error, 1)
	go func() { errc <- g.app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return g.app.ShutdownWithTimeout(g.cfg.RequestTimeout)
	}
}

// rateLimitHeader adds the RateLimit header Medplum's client reads
// ("requests";r=<remaining>;t=<seconds to reset>) from what Fiber's
// limiter reports in its own headers.
func rateLimitHeader(c *fiber.Ctx) error {
	err := c.Next()
	if after := c.GetRespHeader(fiber.HeaderRetryAfter); after != "" {
		c.Set("RateLimit", `"requests";r=0;t=`+after)
	} else if rem := c.GetRespHeader("X-RateLimit-Remaining"); rem != "" {
		c.Set("RateLimit", `"requests";r=`+rem+`;t=`+c.GetRespHeader("X-RateLimit-Reset"))
	}
	return err
}

func (g *Gateway) requestID(c *fiber.Ctx) error {
	id := c.Get("X-Request-Id")
	if id == "" || len(id) > 128 {
		id = uuid.NewString()
	}
	c.Locals("rid", id)
	c.Set("X-Request-Id", id)
	// Binary downloads and bot answers carry a type the caller chose:
	// browsers must not guess another one from the content.
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return c.Next()
}

// requestIDOf is the id requestID gave this request.
func requestIDOf(c *fiber.Ctx) string {
	id, _ := c.Locals("rid").(string)
	return id
}

func (g *Gateway) readyz(c *fiber.Ctx) error {
	if !g.ready.Load() || !g.nc.IsConnected() {
		return c.Status(503).JSON(fiber.Map{"ok": false})
	}
	return c.JSON(fiber.Map{"ok": true, "version": Version})
}

// forward turns the HTTP request into a bus request for the route's service.
func (g *Gateway) forward(r bus.Route) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		start := time.Now()
		var caller *bus.Principal
		defer func() {
			status := statusOf(c, err)
			metrics.HTTPRequests.WithLabelValues(r.Path, r.Method, strconv.Itoa(status)).Inc()
			metrics.Since(metrics.HTTPDuration.WithLabelValues(r.Path, r.Method), start)
			g.accessLog(c, r, status, time.Since(start), caller)
		}()
		req := &bus.Request{
			Method:    c.Method(),
			Path:      c.Path(),
			RawQuery:  string(c.Request().URI().QueryString()),
			Header:    map[string]string{},
			RequestID: requestIDOf(c),
			Remote:    g.clientIP(c),
			Trace:     bus.TraceParentOrNew(c.Get(bus.TraceParent)),
		}
		c.Set(bus.TraceParent, req.Trace)
		if ps := c.AllParams(); len(ps) > 0 {
			req.Params = make(map[string]string, len(ps))
			for k, v := range ps {
				// Fiber hands back path parameters still percent-encoded.
				req.Params[k] = unescape(v)
			}
		}
		for _, h := range bus.ForwardedHeaders {
			if v := c.Get(h); v != "" {
				req.Header[h] = v
			}
		}
		if r.Has(bus.NamesApplied) {
			g.nameApplied(req)
		}
		if auth := r.Auth(); auth == bus.Token || (auth == bus.Optional && c.Get("Authorization") != "") {
			p, err := g.authenticate(c, req.Remote)
			if err != nil {
				return err
			}
			req.Principal, caller = p, p
		}
		// Only now, with the caller known, is the body decoded.
		if req.Body, err = requestBody(c, g.cfg.MaxBodyBytes); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), g.cfg.RequestTimeout)
		defer cancel()
		resp, err := bus.Call(ctx, g.nc, r.Subject, req)
		if err != nil {
			var fe *fhir.Error
			if !errors.As(err, &fe) {
				g.log.Error("forward", "subject", r.Subject, "request_id", req.RequestID, "err", err)
			}
			return err
		}
		if bucket, rev, ok := resp.Session(); ok {
			g.awaitSession(ctx, bucket, rev)
		}
		delete(resp.Header, bus.SessionHeader)
		for k, v := range resp.Header {
			c.Set(k, v)
		}
		return c.Status(resp.Status).Send(resp.Body)
	}
}

// nameApplied tells the identity and bot services how fresh this gateway's
// membership entries are, on the routes that say so (bus.NamesApplied) and
// on a client's HTTP Basic sign-in (basicLogin): a client it authenticates
// must be refused for any removal or deactivation this gateway already
// answered (identity's clientMemberships), and a bot must run with the
// rights its membership has in this gateway's view (botexec's
// botMemberships). Set here, never copied from the caller's headers.
func (g *Gateway) nameApplied(req *bus.Request) {
	req.Header[session.AppliedHeader] = strconv.FormatUint(g.sessions.Applied(session.MembershipsBucket), 10)
}

// statusOf is the status a request ends with: its error's, which onError
// writes, or the response's.
func statusOf(c *fiber.Ctx, err error) int {
	if err != nil {
		return fhir.AsError(err).Status
	}
	return c.Response().StatusCode()
}

// consoleLog is the access log of the console's pages, which answer
// without forward: the route, status and duration (who asked, the
// console knows only after this line's fields are set).
func (g *Gateway) consoleLog(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	g.accessLog(c, bus.Route{Method: c.Method(), Path: c.Route().Path}, statusOf(c, err), time.Since(start), nil)
	return err
}

// accessLog writes one line per request: what was asked (the route, not
// the path, which may hold ids a log should not collect), how it ended and
// who asked. Never a token, a secret, a query or a body.
func (g *Gateway) accessLog(c *fiber.Ctx, r bus.Route, status int, took time.Duration, p *bus.Principal) {
	if !g.log.Enabled(c.UserContext(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", r.Path),
		slog.Int("status", status),
		slog.Float64("ms", float64(took.Microseconds())/1000),
		slog.String("request_id", requestIDOf(c)),
	}
	if t := c.Params("type"); t != "" {
		attrs = append(attrs, slog.String("type", t))
	}
	if p != nil {
		// user is a reference: User/…, or ClientApplication/… for a client
		// signed in as itself; client is the application a user came through.
		attrs = append(attrs, slog.String("project", p.Project), slog.String("user", p.User))
		if p.ClientID != "" {
			attrs = append(attrs, slog.String("client", p.ClientID))
		}
	}
	g.log.LogAttrs(c.UserContext(), slog.LevelInfo, "request", attrs...)
}

// awaitSession holds an answer until this gateway's session view has the
// write it depends on, so the caller's next request sees it (a removed
// member's token fails, a promotion counts). It waits at most two seconds.
func (g *Gateway) awaitSession(ctx context.Context, bucket string, rev uint64) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := g.sessions.WaitApplied(wctx, bucket, rev); err != nil {
		g.log.Warn("session change not seen in time", "bucket", bucket, "revision", rev)
	}
}

func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// onError writes every error as an OperationOutcome — the one place the
// gateway turns errors into responses.
func (g *Gateway) onError(c *fiber.Ctx, err error) error {
	var fe *fhir.Error
	var ferr *fiber.Error
	switch {
	case errors.As(err, &fe):
	case errors.As(err, &ferr):
		switch ferr.Code {
		case http.StatusNotFound, http.StatusMethodNotAllowed:
			fe = fhir.NotFound()
		case http.StatusRequestEntityTooLarge:
			fe = fhir.TooLarge("Request body too large")
		case http.StatusBadRequest:
			fe = fhir.BadRequest(ferr.Message)
		case http.StatusRequestTimeout:
			fe = fhir.Timeout("Request timeout")
		case http.StatusRequestHeaderFieldsTooLarge:
			fe = fhir.HeadersTooLarge()
		default:
			g.log.Warn("http error", "code", ferr.Code, "msg", ferr.Message)
			fe = fhir.Internal()
		}
	default:
		g.log.Error("unhandled", "path", c.Path(), "err", err)
		fe = fhir.Internal()
	}
	for k, v := range fe.Header {
		c.Set(k, v)
	}
	// Requests refused before the middleware ran (413, 431) still get an id.
	if c.Locals("rid") == nil {
		c.Set("X-Request-Id", uuid.NewString())
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	}
	// SCIM clients read SCIM's error envelope, whoever refused (RFC 7644 §3.12).
	if strings.HasPrefix(c.Path(), scimwire.PathPrefix) {
		c.Set("Content-Type", scimwire.ContentType)
		return c.Status(fe.Status).Send(scimwire.From(fe).JSON())
	}
	c.Set("Content-Type", bus.FHIRContentType)
	return c.Status(fe.Status).Send(fe.JSON())
}
