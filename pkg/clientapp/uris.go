// Package clientapp holds the rules a ClientApplication's content meets
// whichever route writes it: the /admin client routes (identity) and the
// FHIR interactions (through pkg/writerules, which the access gate applies).
package clientapp

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Bounds on what CheckURIs reads: a client is read at every sign-in.
const (
	MaxURILength    = 2048
	MaxRedirectURIs = 100
)

// loopbackHosts are where http is allowed (RFC 8252 §7.3, §8.3): a native
// app's own listener, which nothing on the network can reach.
var loopbackHosts = map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true}

// CheckURIs refuses a ClientApplication whose redirectUri, redirectUris[i]
// or launchUri a browser must never be sent to: 400 naming the field. An
// accepted URI is absolute, without a fragment (RFC 6749 §3.1.2), and
// either https, http on a loopback host, or a native app's private-use
// scheme in reverse-domain form (com.example.app:/cb, RFC 8252 §7.1).
// Anything else is refused: javascript:, data:, vbscript: and file: run or
// read in the browser's hands, and a scheme without a dot (urn:, mailto:)
// is no one's registered app.
func CheckURIs(res map[string]any) error {
	if v, ok := res["redirectUri"]; ok {
		if err := check(v, "redirect", "redirectUri"); err != nil {
			return err
		}
	}
	if list, ok := res["redirectUris"].([]any); ok {
		if len(list) > MaxRedirectURIs {
			return fhir.BadRequest(fmt.Sprintf("At most %d redirect URIs", MaxRedirectURIs), "redirectUris")
		}
		for i, v := range list {
			if err := check(v, "redirect", fmt.Sprintf("redirectUris[%d]", i)); err != nil {
				return err
			}
		}
	}
	if v, ok := res["launchUri"]; ok {
		if err := check(v, "launch", "launchUri"); err != nil {
			return err
		}
	}
	return nil
}

// check refuses one URI; kind names it in the message.
func check(v any, kind, expr string) error {
	bad := func(why string) error {
		return fhir.BadRequest("Invalid "+kind+" URI: "+why, expr)
	}
	s, ok := v.(string)
	if ok && len(s) > MaxURILength {
		return bad(fmt.Sprintf("longer than %d characters", MaxURILength))
	}
	u, err := url.Parse(s)
	if !ok || err != nil || u.Scheme == "" || u.Fragment != "" || strings.Contains(s, "#") {
		return bad("want an absolute URI without a fragment")
	}
	if u.User != nil {
		return bad("no user name or password before the host")
	}
	switch scheme := strings.ToLower(u.Scheme); scheme {
	case "https":
		if u.Host == "" {
			return bad("https needs a host")
		}
	case "http":
		if !loopbackHosts[strings.ToLower(u.Hostname())] {
			return bad("http only for a loopback host (127.0.0.1, [::1], localhost); use https")
		}
	default:
		if !strings.Contains(scheme, ".") {
			return bad("the scheme " + scheme + ": is not allowed; use https, http on a loopback host, or an app's reverse-domain scheme (com.example.app:/callback)")
		}
	}
	return nil
}
