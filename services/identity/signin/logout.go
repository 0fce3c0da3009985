package signin

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/web"
)

// /oauth2/logout serves two callers. An API client with a bearer token (or
// HTTP Basic) ends its login, as Medplum's does (@medplum/core signOut).
// A browser, with no token, comes for OpenID Connect RP-initiated logout:
// its sign-in ends without a question only when the application proves
// it asked, with an id_token_hint Pinion signed for the person signed in
// here; then, and only to an address that application registered, the
// browser goes back to it. Anything else — another site's link or form —
// gets a page with a button, so no site can sign a browser out silently.

// Logout is /oauth2/logout.
func (s *Service) Logout(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if r.Principal == nil {
		return s.endSession(ctx, r)
	}
	if err := s.signOutBrowser(ctx, web.BrowserOf(r)); err != nil {
		return nil, err
	}
	if strings.HasPrefix(r.Principal.User, "ClientApplication/") {
		if r.Principal.TokenID == "" {
			// Signed in by HTTP Basic: no token, nothing to end.
			return bus.OK(), nil
		}
		// One login serves all of a client's tokens: end only this token,
		// so the client's other sessions, and its next grant, still work.
		rev, err := s.sessions.RevokeToken(ctx, r.Principal.TokenID)
		if err != nil {
			return nil, err
		}
		return bus.OK().WithSession(session.RevokedBucket, rev), nil
	}
	_, rev, err := s.sessions.UpdateLoginRev(ctx, r.Principal.LoginID, func(l *session.Login) error {
		l.Revoked = true
		return nil
	})
	if errors.Is(err, session.ErrNotFound) {
		// The login expired since the gateway let the request in: it is
		// over already.
		return bus.OK(), nil
	}
	if err != nil {
		return nil, err
	}
	return bus.OK().WithSession(session.LoginsBucket, rev), nil
}

// signOutBrowser ends a browser's sign-in, if it has one.
func (s *Service) signOutBrowser(ctx context.Context, b web.Browser) error {
	if b.IsNew {
		return nil
	}
	if err := s.browsers.Delete(ctx, b.Key()); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// endSession is RP-initiated logout (OpenID Connect RP-Initiated Logout
// 1.0), by GET or by a form POST, and the confirmation page's own POST.
func (s *Service) endSession(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := web.BrowserOf(r)
	params := r.Query
	if r.Method == "POST" {
		if !strings.HasPrefix(strings.ToLower(r.Get("Content-Type")), "application/x-www-form-urlencoded") {
			// Not a browser's form: an API call without a token, refused as
			// the gateway refuses one.
			e := fhir.Unauthorized()
			e.Header = map[string]string{"WWW-Authenticate": `Bearer realm="` + s.cfg.BaseURL + `"`}
			return nil, e
		}
		var err error
		if params, err = url.ParseQuery(string(r.Body)); err != nil {
			return s.pages.Message(400, b, "Not a form", "", "", "The form could not be read. Go back, reload the page and try again.")
		}
		if params.Has("csrf") {
			// The button of the page below: this browser's own page asked.
			form, refused, err := s.pages.Form(ctx, r, b)
			if form == nil {
				return refused, err
			}
			return s.signedOut(ctx, b)
		}
	}
	SignedIn, err := s.SignedIn(ctx, b)
	if err != nil {
		return nil, err
	}
	hint, problem, err := s.logoutHint(params.Get("id_token_hint"), params.Get("client_id"))
	if err != nil {
		return nil, err
	}
	if problem != "" {
		return s.pages.Message(400, b, "Sign-out not understood", "", "", problem)
	}
	if hint == nil || SignedIn != nil && SignedIn.User != "User/"+hint.Subject {
		// Nothing proves who asks, or the application's user is not the
		// one signed in here: the person decides.
		if SignedIn == nil {
			return s.signedOut(ctx, b)
		}
		return s.confirmSignOut(ctx, b)
	}
	if err := s.signOutBrowser(ctx, b); err != nil {
		return nil, err
	}
	if back := params.Get("post_logout_redirect_uri"); back != "" {
		a := AuthRequest{ClientID: hint.Audience[0], RedirectURI: back, State: params.Get("state")}
		problem, err := s.CheckClient(ctx, &a)
		if err != nil {
			return nil, err
		}
		if problem == "" {
			return a.redirect(url.Values{}), nil
		}
	}
	return s.signedOut(ctx, b)
}

// logoutHint verifies an id_token_hint: signed by this service's keys,
// issued by it, for one client, which must be clientID when that is sent.
// An expired hint still says who asks (its application signed the person
// in once); one that does not verify is no hint (nil). A hint that names
// another client than client_id is a problem to show.
func (s *Service) logoutHint(raw, clientID string) (*auth.Claims, string, error) {
	if raw == "" || len(raw) > authserver.MaxPresentedToken {
		return nil, "", nil
	}
	v := s.oauth.IDTokenVerifier() // its keys; the claims are checked below
	c := &auth.Claims{}
	methods := []string{"ES256"}
	if v.RSAKeys != nil {
		methods = append(methods, "RS256")
	}
	_, err := jwt.ParseWithClaims(raw, c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if t.Method == jwt.SigningMethodRS256 {
			if k := v.RSAKeys(kid); k != nil {
				return k, nil
			}
		} else if k := v.Keys(kid); k != nil {
			return k, nil
		}
		return nil, errors.New("unknown key")
	}, jwt.WithValidMethods(methods), jwt.WithoutClaimsValidation())
	if err != nil || c.Issuer != s.cfg.BaseURL || c.FHIRUser == "" || c.Subject == "" || len(c.Audience) != 1 {
		// Only an ID token (fhirUser) of a person names whom to sign out.
		return nil, "", nil
	}
	if clientID != "" && c.Audience[0] != clientID {
		return nil, "The application that asked (client_id) is not the one the sign-in was for (id_token_hint).", nil
	}
	return c, "", nil
}

// confirmSignOut is the page that asks before signing a browser out.
func (s *Service) confirmSignOut(ctx context.Context, b web.Browser) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	// The form posts back to the address it came from, /oauth2/logout.
	return s.pages.Render(200, "signout", b, web.Data{Title: "Sign out of Pinion?", CSRF: csrf,
		Lines: []string{"An application or site asked to sign you out of Pinion in this browser. Sign out only if you meant to."}})
}

// signedOut ends the browser's sign-in and says so.
func (s *Service) signedOut(ctx context.Context, b web.Browser) (*bus.Response, error) {
	if err := s.signOutBrowser(ctx, b); err != nil {
		return nil, err
	}
	return s.pages.Message(200, b, "Signed out", "", "", "You are signed out in this browser. The next sign-in will ask for your password.")
}
