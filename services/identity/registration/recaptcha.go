package registration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
)

// recaptchaTimeout bounds one verification; the request's own deadline,
// when shorter, wins.
const recaptchaTimeout = 10 * time.Second

// maxRecaptchaToken bounds the token a client sends (Google's are about
// 2,000 characters).
const maxRecaptchaToken = 8192

// recaptchaClient makes verification requests; the URL is the operator's
// (PINION_RECAPTCHA_VERIFY_URL), so it may be any address.
var recaptchaClient = &http.Client{Timeout: recaptchaTimeout}

// maxSiteKey bounds a site key (Google's are 40 characters of
// [A-Za-z0-9_-]); it is searched for, so only such characters are taken.
const maxSiteKey = 256

// Medplum's texts for a site key no project has, and one without a secret.
const (
	badSiteKeyText   = "Invalid recaptchaSiteKey"
	badSecretKeyText = "Invalid recaptchaSecretKey"
)

// recaptchaSecret applies the first half of Medplum's reCAPTCHA rule
// (validateRecaptcha) to a registration into project ("" for none): it
// returns the project the registration goes to and the secret key that
// verifies its token ("" for no check). The server's site key (or none)
// takes the server's secret key; any other site key must be a
// Project.site's, of project when one is named, and that site's
// recaptchaSecretKey is taken; a registration naming no project joins the
// site's.
//
// Beyond Medplum: a registration into a project whose sites have site keys
// must use one of them (recaptchaSiteKeys), or the server's key would
// bypass the check the project chose.
func (s *Service) recaptchaSecret(ctx context.Context, siteKey, project string) (string, string, error) {
	if siteKey != "" && siteKey != s.cfg.RecaptchaSiteKey {
		return s.projectSiteSecret(ctx, siteKey, project)
	}
	if project != "" {
		own, err := s.recaptchaSiteKeys(ctx, project)
		if err != nil {
			return "", "", err
		}
		if own {
			return "", "", fhir.BadRequest(badSiteKeyText)
		}
	}
	return project, s.cfg.RecaptchaSecret, nil
}

// checkRecaptcha is the rule's second half: with a secret key, a token is
// required and the verification URL must accept it (siteverify's
// protocol: a form POST of secret, response and remoteip, answered
// {"success": bool}).
func (s *Service) checkRecaptcha(ctx context.Context, secret, token, remote string) error {
	if secret == "" {
		return nil
	}
	if token == "" {
		return fhir.BadRequest("Recaptcha token is required")
	}
	if len(token) > maxRecaptchaToken {
		return fhir.BadRequest("Recaptcha failed")
	}
	ok, err := s.verifyRecaptcha(ctx, secret, token, remote)
	if err != nil {
		s.log.ErrorContext(ctx, "reCAPTCHA verification failed", "err", err)
		return fhir.Unavailable("Recaptcha verification is unavailable")
	}
	if !ok {
		return fhir.BadRequest("Recaptcha failed")
	}
	return nil
}

// recaptchaSite is what reCAPTCHA reads of a Project.site.
type recaptchaSite struct {
	SiteKey   string `json:"recaptchaSiteKey"`
	SecretKey string `json:"recaptchaSecretKey"`
}

// projectSiteSecret finds the project whose site has siteKey (only
// project, when named) and that site's secret key, with Medplum's texts
// when there is none. A key two projects' sites share names neither: a
// project could otherwise copy another's public site key and answer for
// it with its own secret.
func (s *Service) projectSiteSecret(ctx context.Context, siteKey, project string) (string, string, error) {
	if len(siteKey) > maxSiteKey || strings.IndexFunc(siteKey, notKeyRune) >= 0 {
		return "", "", fhir.BadRequest(badSiteKeyText)
	}
	if project != "" && uuid.Validate(project) != nil {
		return "", "", fhir.BadRequest(badSiteKeyText)
	}
	params := url.Values{"recaptcha-site-key": {siteKey}, "_count": {"2"}}
	if project != "" {
		params.Set("_id", project)
	}
	q, err := search.Parse("Project", params)
	if err != nil {
		return "", "", err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "Project", q)
	if err != nil {
		return "", "", err
	}
	if len(page.Resources) != 1 {
		return "", "", fhir.BadRequest(badSiteKeyText)
	}
	res := page.Resources[0]
	var p struct {
		Site []recaptchaSite `json:"site"`
	}
	if err := json.Unmarshal(res.JSON, &p); err != nil {
		return "", "", err
	}
	// The search may match more loosely than the key itself (token
	// search); only a site with exactly this key counts.
	found := false
	for _, site := range p.Site {
		if site.SiteKey == siteKey {
			found = true
			if site.SecretKey != "" {
				return res.ID, site.SecretKey, nil
			}
		}
	}
	if !found {
		return "", "", fhir.BadRequest(badSiteKeyText)
	}
	return "", "", fhir.BadRequest(badSecretKeyText)
}

// recaptchaSiteKeys reports whether one of the project's sites has a
// reCAPTCHA site key with its secret key.
func (s *Service) recaptchaSiteKeys(ctx context.Context, project string) (bool, error) {
	if uuid.Validate(project) != nil {
		return false, nil // refused later as a project that takes no registrations
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "Project", project)
	if fhir.Missing(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var p struct {
		Site []recaptchaSite `json:"site"`
	}
	if err := json.Unmarshal(res.JSON, &p); err != nil {
		return false, err
	}
	for _, site := range p.Site {
		if site.SiteKey != "" && site.SecretKey != "" {
			return true, nil
		}
	}
	return false, nil
}

func notKeyRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

func (s *Service) verifyRecaptcha(ctx context.Context, secret, token, remote string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, recaptchaTimeout)
	defer cancel()
	form := url.Values{"secret": {secret}, "response": {token}}
	if remote != "" {
		form.Set("remoteip", remote)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.RecaptchaURL, strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := recaptchaClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("verification answered %d", resp.StatusCode)
	}
	var out struct {
		Success bool `json:"success"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
		return false, fmt.Errorf("verification answer: %w", err)
	}
	return out.Success, nil
}
