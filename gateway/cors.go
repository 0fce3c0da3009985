package gateway

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/cors"
)

// corsPrefixes are the paths a browser app on another origin may call, as
// Medplum allows them (its cors.ts): the API, not Pinion's own pages.
var corsPrefixes = []string{"/.well-known/", "/admin/", "/auth/", "/fhir/", "/oauth2/", "/storage/", "/scim/"}

// cors answers preflights and adds CORS headers, as Medplum does, for an
// Origin that is the web app's (AppBaseURL) or one of AllowedOrigins ("*":
// any), on corsPrefixes. Any other origin or path gets no CORS header at
// all: the middleware is skipped, and a preflight falls through to 404.
// Origins are compared whole (scheme, host and port), not as prefixes of
// the app's URL as Medplum does, where http://localhost:300 would pass for
// http://localhost:3000/.
func (g *Gateway) cors() fiber.Handler {
	allowed := g.cfg.corsOrigins()
	return cors.New(cors.Config{
		Next: func(c *fiber.Ctx) bool {
			return !corsPath(c.Path()) || !allowed(strings.ToLower(c.Get(fiber.HeaderOrigin)))
		},
		AllowOriginsFunc: func(string) bool { return true }, // Next has checked it
		AllowCredentials: true,
		ExposeHeaders:    "Content-Location,ETag,Last-Modified,Location",
	})
}

func corsPath(path string) bool {
	for _, p := range corsPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// corsOrigins is the test of an Origin header (lower-cased) against the
// configured origins.
func (cfg Config) corsOrigins() func(origin string) bool {
	set := map[string]bool{}
	any := false
	if o := originOf(cfg.AppBaseURL); o != "" {
		set[o] = true
	}
	for _, o := range cfg.AllowedOrigins {
		if o == "*" {
			any = true
		} else if o = originOf(o); o != "" {
			set[o] = true
		}
	}
	return func(origin string) bool {
		if origin == "" || origin == "null" {
			return false
		}
		return any || set[origin]
	}
}

// originOf is the origin (scheme://host[:port], lower case) of an http(s)
// URL, or "".
func originOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}
