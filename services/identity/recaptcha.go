package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
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

// checkRecaptcha applies Medplum's reCAPTCHA rule to a registration: with
// a secret key configured, a token is required and the verification URL
// must accept it (siteverify's protocol: a form POST of secret, response
// and remoteip, answered {"success": bool}).
func (s *Service) checkRecaptcha(ctx context.Context, token, remote string) error {
	if s.cfg.RecaptchaSecret == "" {
		return nil
	}
	if token == "" {
		return fhir.BadRequest("Recaptcha token is required")
	}
	if len(token) > maxRecaptchaToken {
		return fhir.BadRequest("Recaptcha failed")
	}
	ok, err := s.verifyRecaptcha(ctx, token, remote)
	if err != nil {
		s.log.ErrorContext(ctx, "reCAPTCHA verification failed", "err", err)
		return fhir.Unavailable("Recaptcha verification is unavailable")
	}
	if !ok {
		return fhir.BadRequest("Recaptcha failed")
	}
	return nil
}

func (s *Service) verifyRecaptcha(ctx context.Context, token, remote string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, recaptchaTimeout)
	defer cancel()
	form := url.Values{"secret": {s.cfg.RecaptchaSecret}, "response": {token}}
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
