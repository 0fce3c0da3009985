package signin

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
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

// The sign-in page's second factor: after a right password, a person with
// an authenticator is asked for its code (or a recovery code); one whose
// project or invite requires a factor they lack is shown the QR code to
// enrol, then their recovery codes, once. Until then the browser is not
// signed in: the password's success is kept apart (pendingFactor), for a
// short while, under the new browser id.

// pendingFactor is a browser sign-in whose password was right and whose
// second factor is owed.
type pendingFactor struct {
	BrowserSession
	Step    string `json:"step"`    // "verify" or "enroll"
	Expires int64  `json:"expires"` // Unix seconds
}

// pendingFactorLifetime is how long the code may follow the password.
const pendingFactorLifetime = 10 * time.Minute

func pendingKey(b web.Browser) string { return "mfa-" + b.Key() }

// AskFactor keeps the first factor's success (bs, not yet a session) for
// browser b and asks for the second.
func (s *Service) AskFactor(ctx context.Context, b web.Browser, a AuthRequest, bs *BrowserSession, step string) (*bus.Response, error) {
	userID := account.UserIDOf(bs.User)
	if step == "enroll" {
		// A factor is required and no authenticator is enrolled: a
		// passkey, when the person has one, is that factor.
		n, err := s.factors.PasskeyCount(ctx, userID)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			step = "passkey"
		}
	}
	p := pendingFactor{BrowserSession: *bs, Step: step, Expires: time.Now().Add(pendingFactorLifetime).Unix()}
	v, _ := json.Marshal(p)
	if _, err := s.browsers.Put(ctx, pendingKey(b), v); err != nil {
		return nil, err
	}
	return s.factorPage(ctx, b, a, &p, nil)
}

// factorPage shows the code form (with the QR code when enrolling).
func (s *Service) factorPage(ctx context.Context, b web.Browser, a AuthRequest, p *pendingFactor, errs map[string]string) (*bus.Response, error) {
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	if p.Step == "passkey" {
		return s.passkeyStep(ctx, b, a, account.UserIDOf(p.User), "")
	}
	mp := &web.MFA{}
	title := "Enter your code"
	if p.Step == "verify" {
		n, err := s.factors.PasskeyCount(ctx, account.UserIDOf(p.User))
		if err != nil {
			return nil, err
		}
		mp.Passkey = n > 0
	}
	if p.Step == "enroll" {
		title = "Set up your authenticator"
		uid := account.UserIDOf(p.User)
		rec, _, err := s.factors.Load(ctx, uid)
		if err != nil {
			return nil, err
		}
		_, qr, err := s.factors.EnrollAnswer(ctx, uid, rec.Secret)
		if err != nil {
			return nil, err
		}
		mp.QRCode, mp.Key = template.URL(qr), rec.Secret
	}
	status := 200
	if len(errs) > 0 {
		status = 400
	}
	resp, err := s.pages.Render(status, "mfa", b, web.Data{Title: title, CSRF: csrf, Errors: errs, Hidden: a.Values(), App: clientName(a.client), MFA: mp})
	if resp != nil {
		csp := AuthorizeCSP(a.target)
		if mp.QRCode != "" {
			// The QR code is an inline PNG: data: images, and nothing else, join 'self'.
			csp = strings.Replace(csp, "img-src 'self'", "img-src 'self' data:", 1)
		}
		resp.Header["Content-Security-Policy"] = csp
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}

// factorPosted checks the posted code (mfa_code) of a pending sign-in; the
// limiter counts a wrong one as a wrong password.
func (s *Service) factorPosted(ctx context.Context, r *bus.Request, b web.Browser, a AuthRequest, form url.Values) (*bus.Response, error) {
	var p *pendingFactor
	var err error
	if !b.IsNew {
		if p, _, err = kvcas.Entry[pendingFactor](ctx, s.browsers, pendingKey(b)); err != nil {
			return nil, err
		}
	}
	if p == nil || time.Now().Unix() > p.Expires {
		return s.signInPage(ctx, b, a, "", map[string]string{"password": "Sign in again: the code came too late"})
	}
	if p.Step == "passkey" {
		// Only a passkey is owed: no code is checked.
		return s.passkeyStep(ctx, b, a, account.UserIDOf(p.User), "")
	}
	uid := account.UserIDOf(p.User)
	token := form.Get("mfa_code")
	var codes []string
	err = s.factors.LimitedCode(ctx, r, uid, func() error {
		if p.Step == "enroll" {
			var err error
			codes, err = s.factors.EnrollWith(ctx, uid, token)
			return err
		}
		ok, err := s.factors.SpendToken(ctx, uid, token, true)
		if err == nil && !ok {
			return factors.ErrBadCode
		}
		return err
	})
	if errors.Is(err, factors.ErrBadCode) {
		return s.factorPage(ctx, b, a, p, map[string]string{"mfa_code": signInCodeRefused})
	}
	if fe := (*fhir.Error)(nil); errors.As(err, &fe) && fe.Status < 500 {
		return s.factorPage(ctx, b, a, p, map[string]string{"mfa_code": fe.Message()})
	}
	if err != nil {
		return nil, err
	}
	// Both factors given: the browser is signed in.
	if err := s.browsers.Delete(ctx, pendingKey(b)); err != nil {
		return nil, err
	}
	bs := p.BrowserSession
	bs.Factor = true
	if err := s.SignInBrowser(ctx, b, &bs); err != nil {
		return nil, err
	}
	if codes != nil {
		csrf, err := s.pages.CSRFToken(ctx, b)
		if err != nil {
			return nil, err
		}
		resp, err := s.pages.Render(200, "recovery", b, web.Data{Title: "Your recovery codes", CSRF: csrf, Hidden: a.Values(), MFA: &web.MFA{Recovery: codes}})
		if resp != nil {
			resp.Header["Content-Security-Policy"] = AuthorizeCSP(a.target)
			resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
		}
		return resp, err
	}
	resp, err := s.finish(ctx, r, b, a, &bs, nil)
	if resp != nil && resp.Header["Set-Cookie"] == "" {
		resp.Header["Set-Cookie"] = s.pages.SetCookie(b)
	}
	return resp, err
}
