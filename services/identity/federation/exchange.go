package federation

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/egress"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/signin"
)

// RFC 8693's grant and the one subject token type Medplum exchanges.
const (
	grantTokenExchange   = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
)

// Bounds on a token exchange: the external token, and the user info answer.
const (
	maxSubjectToken = 8192
	maxUserInfo     = 64 << 10
)

// tokenExchange is POST /oauth2/token with RFC 8693's grant, as Medplum
// serves it: an access token from the provider of the client's
// identityProvider is shown to the provider's user info endpoint, and the
// person it answers for gets tokens for their membership in the client's
// project (membership_id, or the first). The provider vouches for its
// token; the answer's sub or e-mail is matched as at /auth/external.
type tokenExchange struct{ s *Service }

// Grant is the token exchange, for the authorization server's registry.
func (s *Service) Grant() authserver.Grant { return tokenExchange{s} }

func (tokenExchange) Type() string { return grantTokenExchange }

func (g tokenExchange) Issue(ctx context.Context, r *bus.Request, form url.Values) (*bus.Response, error) {
	s := g.s
	return s.exchangeExternal(ctx, r, form.Get("client_id"), form.Get("subject_token"), form.Get("subject_token_type"),
		form.Get("membership_id"), form.Get("scope"), form.Get("nonce"))
}

// Exchange is POST /auth/exchange {externalAccessToken, clientId},
// Medplum's older form of the same exchange.
func (s *Service) Exchange(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var in struct {
		ExternalAccessToken string `json:"externalAccessToken"`
		ClientID            string `json:"clientId"`
	}
	if err := r.DecodeJSON(&in); err != nil {
		return nil, err
	}
	var issues []fhir.Issue
	if in.ExternalAccessToken == "" {
		issues = append(issues, fhir.FieldIssue("externalAccessToken", "Missing externalAccessToken"))
	}
	if in.ClientID == "" {
		issues = append(issues, fhir.FieldIssue("clientId", "Missing clientId"))
	}
	if len(issues) > 0 {
		return nil, fhir.Invalid(issues...)
	}
	resp, err := s.exchangeExternal(ctx, r, in.ClientID, in.ExternalAccessToken, tokenTypeAccessToken, "", "", "")
	if no := (*authserver.Refusal)(nil); errors.As(err, &no) {
		return no.Response(), nil
	}
	return resp, err
}

func (s *Service) exchangeExternal(ctx context.Context, r *bus.Request, clientID, subjectToken, subjectType, membershipID, scope, nonce string) (*bus.Response, error) {
	switch {
	case clientID == "" || len(clientID) > 64:
		return nil, authserver.InvalidRequest("Invalid client")
	case subjectToken == "" || len(subjectToken) > maxSubjectToken:
		return nil, authserver.InvalidRequest("Invalid subject_token")
	case subjectType != tokenTypeAccessToken:
		return nil, authserver.InvalidRequest("Invalid subject_token_type")
	}
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", clientID)
	var fe *fhir.Error
	if errors.As(err, &fe) && fe.Status == 404 {
		return nil, authserver.InvalidRequest("Invalid client")
	}
	if err != nil {
		return nil, err
	}
	idp, err := providerOf(res.JSON)
	if err != nil {
		return nil, err
	}
	if idp == nil {
		return nil, authserver.InvalidRequest("Invalid client")
	}
	claims, err := s.externalUserInfo(ctx, idp, subjectToken)
	if err != nil {
		return nil, err
	}
	email, externalID, err := claims.identity(idp)
	if err != nil {
		return nil, authserver.InvalidRequest(fhirText(err))
	}
	userRef, choices, err := s.externalMember(ctx, email, externalID, res.Project)
	if err != nil {
		return nil, authserver.InvalidRequest(fhirText(err))
	}
	chosen := choices[0]
	if membershipID != "" {
		i := slices.IndexFunc(choices, func(c account.Choice) bool { return c.ID == membershipID })
		if i < 0 {
			return nil, authserver.InvalidRequest("Membership not found")
		}
		chosen = choices[i]
	}
	// The provider's word reaches the client's project only, and stands
	// for a second factor only where that project trusts it: a token
	// exchange cannot ask for one.
	proof := factors.Proof{Method: signin.AuthExchange, ProviderProject: res.Project, ProviderMFA: claims.assertsFactor()}
	step, _, err := s.factors.Owed(ctx, account.UserIDOf(userRef), res.Project, proof)
	if err != nil {
		return nil, err
	}
	if step != "" {
		return nil, authserver.InvalidRequest(secondFactorText)
	}
	if err := s.signins.CheckSignIn(ctx, chosen.ID, r.Remote, proof); err != nil {
		if errors.Is(err, signin.ErrFactorOwed) {
			return nil, authserver.InvalidRequest(secondFactorText)
		}
		return nil, authserver.InvalidRequest(fhirText(err))
	}
	if scope == "" {
		scope = "openid offline"
	}
	if nonce == "" {
		nonce = uuid.NewString()
	}
	now := time.Now()
	l := session.Login{User: userRef, Client: clientID, Scope: scope, Nonce: nonce, Membership: chosen.ID,
		AuthTime: now.Unix(), Start: now.UnixMilli(), Project: res.Project, Granted: true,
		ProviderProject: res.Project, ProviderMFA: proof.ProviderMFA}
	refresh := authserver.RotateRefresh(&l)
	l.SetOrigin(signin.AuthExchange, r.Remote, r.Get("User-Agent"))
	loginID := uuid.NewString()
	if err := s.putExternalSignIn(ctx, loginID, &l); err != nil {
		return nil, err
	}
	return s.oauth.UserTokens(ctx, r, "urn:ietf:params:oauth:grant-type:token-exchange", loginID, &l, refresh)
}

// secondFactorText refuses a token exchange for a person who owes a
// second factor the exchange cannot ask for.
const secondFactorText = "A second factor is required: this project does not take its identity provider's"

// fhirText is an OperationOutcome's text, for an OAuth error description.
func fhirText(err error) string {
	var fe *fhir.Error
	if errors.As(err, &fe) && len(fe.Outcome.Issue) > 0 && fe.Outcome.Issue[0].Details != nil {
		return fe.Outcome.Issue[0].Details.Text
	}
	return err.Error()
}

// externalUserInfo asks the provider's user info endpoint who the token
// is for. Only a JSON answer is taken: a JWT one would need its own
// verification, which Medplum skips.
func (s *Service) externalUserInfo(ctx context.Context, idp *identityProvider, token string) (*externalClaims, error) {
	failed := authserver.InvalidRequest("Failed to verify code - check your identity provider configuration")
	u, err := url.Parse(idp.UserInfoURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, authserver.InvalidRequest("Invalid user info URL - check your identity provider configuration")
	}
	ctx, cancel := context.WithTimeout(ctx, externalTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u.String(), nil)
	if err != nil {
		return nil, failed
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := egress.Client(s.cfg.EgressPrivate, externalTimeout).Do(req)
	if err != nil {
		s.log.Warn("token exchange: user info request failed", "userInfoUrl", idp.UserInfoURL, "err", err)
		return nil, failed
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == 429:
		return nil, fhir.TooManyRequests()
	case resp.StatusCode != 200:
		s.log.Warn("token exchange: user info refused the token", "userInfoUrl", idp.UserInfoURL, "status", resp.StatusCode)
		return nil, failed
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, authserver.InvalidRequest("Failed to verify code - unsupported content type: " + mt)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUserInfo+1))
	if err != nil || len(body) > maxUserInfo {
		return nil, failed
	}
	var c externalClaims
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, failed
	}
	return &c, nil
}
