package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/pinion-health/pinion/pkg/egress"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// Client assertions: private_key_jwt (RFC 7523 §2.2), as SMART Backend
// Services and Medplum's CLI (`login --auth-type jwt-assertion`) use it.
// The client signs a short-lived JWT with a private key whose public half
// it publishes at its ClientApplication.jwksUri; the JWT stands in for the
// client secret.

const (
	JWTBearerAssertion = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
	// maxAssertionLife is how far ahead an assertion may expire: SMART
	// Backend Services asks for at most five minutes.
	maxAssertionLife = 5 * time.Minute
	assertionLeeway  = 30 * time.Second
	// A client's key set is fetched again after jwksTTL, or at most every
	// jwksRefetch when an assertion names a key it does not hold.
	jwksTTL     = 5 * time.Minute
	jwksRefetch = 10 * time.Second
	// A key set that could not be fetched is not asked for again before
	// jwksFailTTL: a dead or hanging jwksUri costs one fetch a window, not
	// one per token request.
	jwksFailTTL = 30 * time.Second
	maxJWKSSize = 64 << 10
	// jwksTimeout bounds one fetch of what is a small static document.
	jwksTimeout = 3 * time.Second
	// The bounds of the caches of key sets and of assertion ids seen.
	maxKeySets  = 1000
	maxSeenJTIs = 100_000
	// At most jwksFetchers fetches run at once, for all clients; a fetch
	// that finds no slot within jwksSlotWait is refused rather than queued
	// behind servers that hang.
	jwksFetchers = 8
	jwksSlotWait = 50 * time.Millisecond
)

// assertionAlgs are the signatures Medplum accepts; HMAC and none never.
var assertionAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}

// assertions checks client assertions: it caches the clients' key sets
// (and the failures to fetch them) and remembers the assertion ids it has
// accepted until they expire, so that an assertion is good for one token
// (per identity instance).
type assertions struct {
	// A jwksUri is written by a project member and fetched on an anonymous
	// request: egress keeps it out of Pinion's own network.
	http    *http.Client
	sets    *lru.Cache[string, *keySet]
	flights singleflight.Group // one fetch in flight per URI
	slots   chan struct{}      // bounds fetches in flight for all URIs
	mu      sync.Mutex
	seen    *lru.Cache[string, time.Time]
}

// keySet is the outcome of a fetch of a key set: its keys, or why there
// are none.
type keySet struct {
	keys    []jose.JSONWebKey
	fetched time.Time
	err     error
}

// newAssertions checks assertions, fetching key sets from private
// addresses only if allowPrivate.
func newAssertions(allowPrivate bool) *assertions {
	sets, _ := lru.New[string, *keySet](maxKeySets)
	seen, _ := lru.New[string, time.Time](maxSeenJTIs)
	return &assertions{
		http:  egress.Client(allowPrivate, jwksTimeout),
		sets:  sets,
		seen:  seen,
		slots: make(chan struct{}, jwksFetchers),
	}
}

// clientAssertion authenticates a client by its assertion and returns the
// client's id, or why it was refused.
func (s *Service) clientAssertion(ctx context.Context, typ, assertion string) (string, *Refusal, error) {
	id, no := assertionIssuer(typ, assertion)
	if no != nil {
		return "", no, nil
	}
	client, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", id)
	if err != nil {
		if fhir.Missing(err) {
			return "", InvalidClient("Invalid client"), nil
		}
		return "", nil, err
	}
	var c struct {
		JWKSURI string `json:"jwksUri"`
	}
	if err := json.Unmarshal(client.JSON, &c); err != nil {
		return "", nil, err
	}
	if c.JWKSURI == "" {
		return "", InvalidClient("Client must have a JWK Set URL"), nil
	}
	keys := func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		set, err := s.assertions.keys(ctx, c.JWKSURI, kid)
		if errors.Is(err, errNoKeySet) {
			s.log.Warn("client key set unavailable", "client", id, "err", err)
		}
		return set, err
	}
	now := time.Now()
	claims, no := checkAssertion(assertion, id, assertionAudiences(s.cfg.BaseURL), keys, now)
	if no != nil {
		return "", no, nil
	}
	if !s.assertions.first(id+"|"+claims.ID, claims.ExpiresAt.Time, now) {
		return "", InvalidClient("Client assertion already used"), nil
	}
	return id, nil, nil
}

// assertionIssuer reads, unverified, which client an assertion says it is:
// its issuer, which must also be its subject (RFC 7523 §3). Nothing is
// looked up for an assertion that fails here.
func assertionIssuer(typ, assertion string) (string, *Refusal) {
	if typ != JWTBearerAssertion {
		return "", InvalidClient("Unsupported client assertion type")
	}
	var unverified jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(assertion, &unverified); err != nil {
		return "", InvalidClient("Invalid client assertion")
	}
	id := unverified.Issuer
	if id == "" || id != unverified.Subject {
		return "", InvalidClient("Invalid client assertion issuer")
	}
	return id, nil
}

// assertionAudiences are the audiences an assertion may name: the token
// endpoint, or the issuer (RFC 7523 §3), with or without its trailing
// slash; oauth4webapi sends the issuer.
func assertionAudiences(base string) []string {
	return []string{base + "oauth2/token", base, strings.TrimSuffix(base, "/")}
}

// checkAssertion verifies an assertion of client id at now: signed with
// one of its keys (keys finds them) by an allowed algorithm, issued by the
// client about itself, for one of audiences, expiring within
// maxAssertionLife, with an id to spend it by.
func checkAssertion(assertion, id string, audiences []string, keys jwt.Keyfunc, now time.Time) (*jwt.RegisteredClaims, *Refusal) {
	refuse := func(text string) (*jwt.RegisteredClaims, *Refusal) { return nil, InvalidClient(text) }
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(assertion, &claims, keys,
		jwt.WithValidMethods(assertionAlgs), jwt.WithIssuer(id), jwt.WithSubject(id), jwt.WithAudience(audiences...),
		jwt.WithExpirationRequired(), jwt.WithLeeway(assertionLeeway), jwt.WithTimeFunc(func() time.Time { return now }))
	switch {
	case errors.Is(err, errNoKeySet):
		return refuse("Could not read the client's JWK Set")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse("Invalid client assertion audience")
	case err != nil:
		return refuse("Invalid client assertion signature")
	case claims.ExpiresAt.After(now.Add(maxAssertionLife + assertionLeeway)):
		return refuse("Client assertion must expire within 5 minutes")
	case claims.ID == "":
		return refuse("Client assertion has no jti")
	}
	return &claims, nil
}

// errNoKeySet is a key set that could not be fetched or read.
var errNoKeySet = errors.New("no key set")

// errFetchBusy: every fetch slot is taken, by servers slow to answer.
var errFetchBusy = fmt.Errorf("%w: every key set fetch is busy; try again", errNoKeySet)

// keys returns the keys to verify with: the one named kid, or all of them
// (jwt tries each). A kid the cached set lacks fetches the set again, at
// most every jwksRefetch; a set that could not be fetched is refused
// without asking again for jwksFailTTL.
func (a *assertions) keys(ctx context.Context, uri, kid string) (jwt.VerificationKeySet, error) {
	set, ok := a.sets.Get(uri)
	if !ok || set.stale(kid, time.Now()) {
		fresh, err := a.refresh(ctx, uri)
		if err != nil {
			return jwt.VerificationKeySet{}, err
		}
		set = fresh
	}
	if set.err != nil {
		return jwt.VerificationKeySet{}, set.err
	}
	var out jwt.VerificationKeySet
	for _, k := range set.keys {
		if kid == "" || k.KeyID == kid {
			out.Keys = append(out.Keys, k.Key)
		}
	}
	if len(out.Keys) == 0 {
		return out, fmt.Errorf("no key %q", kid)
	}
	return out, nil
}

// stale reports whether a cached outcome is to be fetched again at now,
// for an assertion naming kid.
func (s *keySet) stale(kid string, now time.Time) bool {
	age := now.Sub(s.fetched)
	if s.err != nil {
		return age > jwksFailTTL
	}
	return age > jwksTTL || (kid != "" && !s.has(kid) && age > jwksRefetch)
}

// refresh fetches uri's key set and caches the outcome, failure included.
// Requests that need the same set at once share one fetch; a fetch that
// gets no slot at once fails fast. The fetch does not end with the
// request that started it, whose peers still wait for it; each request
// waits only as long as its own context allows.
func (a *assertions) refresh(ctx context.Context, uri string) (*keySet, error) {
	flight := a.flights.DoChan(uri, func() (any, error) {
		wait := time.NewTimer(jwksSlotWait)
		defer wait.Stop()
		select {
		case a.slots <- struct{}{}:
			defer func() { <-a.slots }()
		case <-wait.C:
			return nil, errFetchBusy
		}
		fctx, cancel := context.WithTimeout(context.Background(), jwksTimeout)
		defer cancel()
		set, err := a.load(fctx, uri)
		if err != nil {
			set = &keySet{fetched: time.Now(), err: err}
		}
		a.sets.Add(uri, set)
		return set, nil
	})
	select {
	case r := <-flight:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*keySet), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", errNoKeySet, ctx.Err())
	}
}

func (s *keySet) has(kid string) bool {
	for _, k := range s.keys {
		if k.KeyID == kid {
			return true
		}
	}
	return false
}

// load fetches a JWK Set: http(s) only, from a public address unless
// allowed otherwise, bounded in time and size, no redirect followed, its
// public signing keys only.
func (a *assertions) load(ctx context.Context, uri string) (*keySet, error) {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q is not an http(s) URL", errNoKeySet, uri)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", uri, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoKeySet, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoKeySet, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%w: %s answered %d", errNoKeySet, uri, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil || len(body) > maxJWKSSize {
		return nil, fmt.Errorf("%w: %s: unreadable or over %d bytes", errNoKeySet, uri, maxJWKSSize)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoKeySet, err)
	}
	out := &keySet{fetched: time.Now()}
	for _, k := range set.Keys {
		if !k.Valid() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		out.keys = append(out.keys, k.Public())
	}
	return out, nil
}

// first records an assertion id until it expires and reports whether it
// was new at now.
func (a *assertions) first(key string, exp, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if until, ok := a.seen.Get(key); ok && now.Before(until.Add(assertionLeeway)) {
		return false
	}
	a.seen.Add(key, exp)
	return true
}
