package signin

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/web"
)

// The passkey pages: /passkeys, where a person signed in in this browser
// manages theirs, and the passkey step of /oauth2/authorize (no password,
// or after one in place of a code). WebAuthn is a browser API: these are
// the only pages with a script (pages/passkey.js), allowed by its hash.

// PasskeysPage is GET and POST /passkeys: the signed-in person's passkeys,
// and the forms that add (begin, then finish), rename and remove one.
func (s *Service) PasskeysPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b, bs, refused, err := s.ownPage(ctx, r, "Your passkeys are managed here once you are signed in in this browser.")
	if bs == nil {
		return refused, err
	}
	uid := account.UserIDOf(bs.User)
	pp := &web.Passkeys{}
	errs := map[string]string{}
	if r.Method == "POST" {
		form, refused, err := s.pages.Form(ctx, r, b)
		if form == nil {
			return refused, err
		}
		pp.Name = strings.TrimSpace(form.Get("name"))
		err = nil
		switch form.Get("action") {
		case "begin":
			if _, err = factors.PasskeyName(pp.Name); err == nil {
				var creation any
				if creation, err = s.factors.BeginRegistration(ctx, uid); err == nil {
					o, _ := json.Marshal(creation)
					pp.Options = string(o)
				}
			}
		case "finish":
			if _, err = s.factors.FinishRegistration(ctx, uid, pp.Name, []byte(form.Get("credential"))); err == nil {
				pp.Notice, pp.Name = "Passkey “"+pp.Name+"” added.", ""
			}
		case "rename":
			if err = s.factors.RenamePasskey(ctx, uid, form.Get("id"), pp.Name); err == nil {
				pp.Notice, pp.Name = "Passkey renamed.", ""
			}
		case "remove":
			if err = s.factors.RemovePasskey(ctx, uid, form.Get("id")); err == nil {
				pp.Notice, pp.Name = "Passkey removed.", ""
			}
		default:
			err = fhir.BadRequest("Unknown action")
		}
		if fe := (*fhir.Error)(nil); errors.As(err, &fe) && fe.Status < 500 {
			field := "passkey"
			if len(fe.Outcome.Issue) > 0 && len(fe.Outcome.Issue[0].Expression) > 0 && fe.Outcome.Issue[0].Expression[0] == "name" {
				field = "name"
			}
			errs[field] = fe.Message()
		} else if err != nil {
			return nil, err
		}
	}
	if pp.Email, err = s.accounts.UserEmail(ctx, uid); err != nil {
		return nil, err
	}
	views, err := s.factors.PasskeyViews(ctx, uid)
	if err != nil {
		return nil, err
	}
	for _, v := range views {
		pp.Keys = append(pp.Keys, web.Passkey{ID: v.ID, Name: v.Name, Created: v.Created, LastUsed: v.LastUsed})
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	status := 200
	if len(errs) > 0 {
		status = 400
	}
	resp, err := s.pages.Render(status, "passkeys", b, web.Data{Title: "Your passkeys", CSRF: csrf, Errors: errs, Passkeys: pp,
		Link: s.cfg.BaseURL + "console"})
	if resp != nil {
		resp.Header["Content-Security-Policy"] = web.WithPasskeyScript(web.CSP)
	}
	return resp, err
}

// ownPage opens a page of the person signed in in the browser (their
// passkeys, their consents): the browser and its sign-in, or, with none,
// the page that asks them to sign in first, saying why.
func (s *Service) ownPage(ctx context.Context, r *bus.Request, why string) (web.Browser, *BrowserSession, *bus.Response, error) {
	b := web.BrowserOf(r)
	bs, err := s.SignedIn(ctx, b)
	if err != nil || bs != nil {
		return b, bs, nil, err
	}
	resp, err := s.pages.Message(401, b, "Sign in first", s.cfg.BaseURL+"console", "Sign in", why)
	return b, nil, resp, err
}

// passkeyPosted is the passkey step of /oauth2/authorize ("passkey" is
// "begin" or "finish"): with no password (any passkey; the browser
// offers those it holds), or after one (a pending second factor, that
// user's passkeys only).
func (s *Service) passkeyPosted(ctx context.Context, r *bus.Request, b web.Browser, a AuthRequest, form url.Values) (*bus.Response, error) {
	var p *pendingFactor
	if !b.IsNew {
		var err error
		if p, _, err = kvcas.Entry[pendingFactor](ctx, s.browsers, pendingKey(b)); err != nil {
			return nil, err
		}
		if p != nil && time.Now().Unix() > p.Expires {
			p = nil
		}
	}
	wantUser := ""
	if p != nil {
		wantUser = account.UserIDOf(p.User)
	}
	if form.Get("passkey") != "finish" {
		return s.passkeyStep(ctx, b, a, wantUser, "")
	}
	uid, err := s.factors.FinishPasskeyLogin(ctx, b, []byte(form.Get("credential")))
	if fe := (*fhir.Error)(nil); errors.As(err, &fe) && fe.Status < 500 {
		if err := s.recordPasskey(ctx, r, a, "", fe.Message()); err != nil {
			return nil, err
		}
		return s.passkeyStep(ctx, b, a, wantUser, fe.Message())
	}
	if err != nil {
		return nil, err
	}
	if err := s.recordPasskey(ctx, r, a, uid, ""); err != nil {
		return nil, err
	}
	now := time.Now()
	bs := BrowserSession{User: "User/" + uid, AuthTime: now.Unix(), Start: now.UnixMilli()}
	nb := b
	if p != nil && uid == wantUser {
		// The password was given under this browser id already (a new one).
		if err := s.browsers.Delete(ctx, pendingKey(b)); err != nil {
			return nil, err
		}
		bs = p.BrowserSession
	} else {
		// A new browser id at sign-in, as after a password.
		nb = web.NewBrowser()
	}
	// A passkey verifies its user (possession and a PIN or biometric): it
	// is a second factor whether or not a password came first.
	bs.Factor = true
	if err := s.SignInBrowser(ctx, nb, &bs); err != nil {
		return nil, err
	}
	resp, err := s.finish(ctx, r, nb, a, &bs, nil)
	if resp != nil && resp.Header["Set-Cookie"] == "" {
		resp.Header["Set-Cookie"] = s.pages.SetCookie(nb)
	}
	return resp, err
}

// passkeyStep makes a sign-in challenge for browser b (userID's passkeys,
// or any) and shows the page that answers it, with problem beside it.
func (s *Service) passkeyStep(ctx context.Context, b web.Browser, a AuthRequest, userID, problem string) (*bus.Response, error) {
	assertion, err := s.factors.BeginPasskeyLogin(ctx, b, userID)
	if fe := (*fhir.Error)(nil); errors.As(err, &fe) && fe.Status < 500 && userID == "" {
		return s.signInPage(ctx, b, a, "", map[string]string{"password": fe.Message()})
	}
	if err != nil {
		return nil, err
	}
	o, _ := json.Marshal(assertion)
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	d := web.Data{Title: "Sign in with a passkey", CSRF: csrf, Hidden: a.Values(), App: clientName(a.client),
		Passkeys: &web.Passkeys{Options: string(o)}}
	status := 200
	if problem != "" {
		d.Errors, status = map[string]string{"passkey": problem}, 400
	}
	resp, err := s.pages.Render(status, "passkeysignin", b, d)
	if resp != nil {
		resp.Header["Content-Security-Policy"] = web.WithPasskeyScript(AuthorizeCSP(a.target))
		if resp.Header["Set-Cookie"] == "" {
			resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
		}
	}
	return resp, err
}
