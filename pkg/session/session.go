// Package session keeps the state a token depends on — is its login still
// good, is its membership still active, what may it do — in two NATS
// key-value buckets. Identity and membership write them; the gateway keeps a
// local view by watching them, so checking a token needs no database query
// and no network round trip, and a revocation reaches every gateway at once.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/kvcas"
)

// Bucket names.
const (
	LoginsBucket      = "pinion_logins"
	MembershipsBucket = "pinion_memberships"
	// RevokedBucket lists single tokens ended before their expiry (by jti):
	// a client-credentials sign-out ends that token, not the client's login.
	RevokedBucket = "pinion_revoked_tokens"
	// EndedBucket holds, per user, when all of its sign-ins were ended (a
	// password was set or reset): every login started before is dead.
	EndedBucket = "pinion_sessions_ended"
)

// RevokedTTL is how long a revoked token is remembered; access tokens must
// not live longer (config refuses a longer lifetime).
const RevokedTTL = 25 * time.Hour

// RefreshLifetime is how long a refresh token is good (Medplum: two weeks).
const RefreshLifetime = 14 * 24 * time.Hour

// LoginTTL is how long a login is kept after its last write. Every token
// of a login lives shorter (access tokens at most a day, refresh tokens
// RefreshLifetime from the rotation that wrote the login), so a login the
// bucket has dropped has no token left that could need it. Without a TTL
// every sign-in would be kept, and held by every gateway, for ever.
const LoginTTL = RefreshLifetime + 24*time.Hour

// markerTTL is how long the bucket keeps the marker it writes when the TTL
// removes a key: the markers are what tell watchers (the gateways' views)
// to forget the key too.
const markerTTL = time.Hour

// Config sets the lifetimes of the buckets; zero fields take the defaults
// (tests shorten them).
type Config struct {
	LoginTTL   time.Duration
	RevokedTTL time.Duration
}

// Login is one sign-in: the membership it acts as, and whether it still counts.
type Login struct {
	Membership string `json:"m"`
	User       string `json:"u"` // User/<id> or ClientApplication/<id>
	Client     string `json:"c,omitempty"`
	Scope      string `json:"s,omitempty"`
	Revoked    bool   `json:"r,omitempty"`

	// The sign-in flow's state, used by identity only.
	CodeDigest      string `json:"cd,omitempty"`
	CodeAt          int64  `json:"ca,omitempty"` // when the code was issued, Unix milliseconds
	Challenge       string `json:"ch,omitempty"`
	ChallengeMethod string `json:"chm,omitempty"`
	Granted         bool   `json:"g,omitempty"`
	RefreshDigest   string `json:"rd,omitempty"`
	Nonce           string `json:"n,omitempty"`
	AuthTime        int64  `json:"at,omitempty"`
	Start           int64  `json:"st,omitempty"` // when the sign-in began, Unix milliseconds
	Project         string `json:"p,omitempty"`  // the project asked for at sign-in
	// NoPKCE: a browser sign-in without a code challenge, for a client
	// whose pkceOptional allows it; its code is redeemed without a verifier.
	NoPKCE bool `json:"np,omitempty"`
	// RedirectURI is the redirect_uri the authorization request sent, which
	// the token request must send again (RFC 6749 §4.1.3); "" when none.
	RedirectURI string `json:"ru,omitempty"`
	// Consented: the code was issued after the person consented to the
	// client (a client that is not first-party); its refresh tokens stop
	// when the consent is withdrawn.
	Consented bool `json:"cs,omitempty"`
	// How and from where the sign-in was made, for the person's list of
	// their sessions (/auth/me): Medplum's authMethod ("password",
	// "client"), the client's address and User-Agent, cut by SetOrigin.
	AuthMethod    string `json:"am,omitempty"`
	RemoteAddress string `json:"ra,omitempty"`
	UserAgent     string `json:"ua,omitempty"`
	// MFA is the second factor a password sign-in still owes before any
	// profile or code ("verify": a code from the enrolled authenticator;
	// "enroll": enrolment the project or invite requires); MFAVerified
	// says it was given (Medplum's Login.mfaVerified).
	MFA         string `json:"mfa,omitempty"`
	MFAVerified bool   `json:"mv,omitempty"`
	// ProviderProject is the project whose identity provider (a client's)
	// vouched for the person: the sign-in reaches that project only, and
	// changes nothing of the person's own account unless that project
	// holds all of it. "" for a password, Google, or a domain's provider
	// (written by super admins). ProviderMFA: the provider asserted a
	// second factor (amr), which counts where the project trusts it.
	ProviderProject string `json:"pp,omitempty"`
	ProviderMFA     bool   `json:"pm,omitempty"`
	// Launch is the SMART launch context the sign-in was given: an EHR
	// launch's (a SmartAppLaunch) or the patient chosen on the picker.
	// Its patient confines the login's patient/ scopes.
	Launch *Launch `json:"lc,omitempty"`
}

// Launch is a SMART App Launch context: ids of the patient and encounter
// in context, and the references of SMART 2's fhirContext.
type Launch struct {
	Patient     string   `json:"p,omitempty"`
	Encounter   string   `json:"e,omitempty"`
	FHIRContext []string `json:"f,omitempty"`
	// Scope is the launch scope the context answers: "launch" (EHR) or
	// "launch/patient" (the picker).
	Scope string `json:"s"`
}

// Patient is the patient in the login's launch context, or "".
func (l *Login) Patient() string {
	if l == nil || l.Launch == nil {
		return ""
	}
	return l.Launch.Patient
}

// Membership is what a token may do in its project.
type Membership struct {
	Project      string `json:"p"`
	User         string `json:"u"`
	Profile      string `json:"pr"`
	Admin        bool   `json:"a,omitempty"`
	SuperAdmin   bool   `json:"sa,omitempty"`
	Active       bool   `json:"ac"`
	AccessPolicy bool   `json:"ap,omitempty"`
	// Addresses are the ipAccessRule entries of the membership's access
	// policies, in order, parameters filled in.
	Addresses []AddressRule `json:"ip,omitempty"`
	// MFARequired: the project requires a second factor of this member
	// (an invite's mfaRequired, projects.MFARequiredURL).
	MFARequired bool `json:"mfa,omitempty"`
}

// AddressRule is one AccessPolicy.ipAccessRule entry.
type AddressRule struct {
	Value string `json:"v"`
	Block bool   `json:"b,omitempty"`
}

// AllowsAddress applies the membership's address rules to a client
// address, as Medplum does: the first rule that matches decides (allow or
// block), and an address no rule matches is allowed. An unknown address
// ("", a bot's own call) is allowed.
func (m *Membership) AllowsAddress(ip string) bool {
	if ip == "" {
		return true
	}
	for _, r := range m.Addresses {
		if MatchAddress(r.Value, ip) {
			return !r.Block
		}
	}
	return true
}

// MatchAddress reports whether a rule's value covers an address: "*",
// the address itself, a CIDR range, or a prefix ending in '.' or ':'
// ("192.168."). Medplum matches any string prefix, so that a rule for
// 10.0.0.1 also covers 10.0.0.15; here a prefix must end at a boundary.
func MatchAddress(value, ip string) bool {
	switch {
	case value == "*" || value == ip:
		return true
	case strings.Contains(value, "/"):
		p, err := netip.ParsePrefix(value)
		a, err2 := netip.ParseAddr(ip)
		return err == nil && err2 == nil && p.Contains(a.Unmap())
	case strings.HasSuffix(value, ".") || strings.HasSuffix(value, ":"):
		return strings.HasPrefix(ip, value)
	}
	return false
}

// Store writes and reads the buckets.
type Store struct {
	logins, memberships, revoked, ended jetstream.KeyValue

	js        jetstream.JetStream
	cfg       Config
	userMu    sync.Mutex
	userLogin *UserLogins // opened on first use (UserLogins)
}

// Open creates the buckets if needed (file storage: they survive a restart).
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.LoginTTL == 0 {
		cfg.LoginTTL = LoginTTL
	}
	if cfg.RevokedTTL == 0 {
		cfg.RevokedTTL = RevokedTTL
	}
	open := func(name string, ttl time.Duration) (jetstream.KeyValue, error) {
		c := jetstream.KeyValueConfig{
			Bucket:  name,
			History: 1,
			Storage: jetstream.FileStorage,
			TTL:     ttl,
		}
		if ttl > 0 {
			c.LimitMarkerTTL = min(markerTTL, ttl)
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("kv bucket %s: %w", name, err)
		}
		return kv, nil
	}
	l, err := open(LoginsBucket, cfg.LoginTTL)
	if err != nil {
		return nil, err
	}
	m, err := open(MembershipsBucket, 0)
	if err != nil {
		return nil, err
	}
	r, err := open(RevokedBucket, cfg.RevokedTTL)
	if err != nil {
		return nil, err
	}
	// An end matters only while a login that began before it can exist.
	e, err := open(EndedBucket, cfg.LoginTTL)
	if err != nil {
		return nil, err
	}
	return &Store{logins: l, memberships: m, revoked: r, ended: e, js: js, cfg: cfg}, nil
}

// PutLogin records a login and returns the bucket revision written.
func (s *Store) PutLogin(ctx context.Context, id string, l Login) (uint64, error) {
	b, _ := json.Marshal(l)
	return s.logins.Put(ctx, id, b)
}

// PutMembership records a membership's current rights.
func (s *Store) PutMembership(ctx context.Context, id string, m Membership) (uint64, error) {
	b, _ := json.Marshal(m)
	return s.memberships.Put(ctx, id, b)
}

// ErrConflict: the entry changed since the revision a write was made at.
var ErrConflict = errors.New("session: entry changed meanwhile")

// MembershipRevision is the revision of a membership's entry, 0 if none:
// a writer that derives the entry from the stored resource reads it
// before the resource and writes at it (PutMembershipAt,
// DeleteMembershipAt), so an older read never overwrites a newer entry,
// whichever process made it.
func (s *Store) MembershipRevision(ctx context.Context, id string) (uint64, error) {
	e, err := s.memberships.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return e.Revision(), nil
}

// PutMembershipAt records a membership's rights if its entry is still at
// rev (0: there is none), else fails with ErrConflict.
func (s *Store) PutMembershipAt(ctx context.Context, id string, m Membership, rev uint64) (uint64, error) {
	b, _ := json.Marshal(m)
	var err error
	if rev == 0 {
		rev, err = s.memberships.Create(ctx, id, b)
	} else {
		rev, err = s.memberships.Update(ctx, id, b, rev)
	}
	return rev, conflict(err)
}

// DeleteMembershipAt forgets a membership if its entry is still at rev
// (0: there is none, and nothing is written), else fails with
// ErrConflict. It returns the bucket's revision after the delete.
func (s *Store) DeleteMembershipAt(ctx context.Context, id string, rev uint64) (uint64, error) {
	if rev != 0 {
		if err := s.memberships.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
			return 0, conflict(err)
		}
	}
	return lastRevision(ctx, s.memberships)
}

// conflict maps the bucket's answers to a write at a stale revision to
// ErrConflict.
func conflict(err error) error {
	if kvcas.Conflict(err) {
		return fmt.Errorf("%w (%v)", ErrConflict, err)
	}
	return err
}

// DeleteMembership forgets a membership: its tokens stop working. It
// returns the bucket's revision after the delete.
func (s *Store) DeleteMembership(ctx context.Context, id string) (uint64, error) {
	err := s.memberships.Delete(ctx, id)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, err
	}
	return lastRevision(ctx, s.memberships)
}

// lastRevision is the newest revision of a bucket (its stream's last sequence).
func lastRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	si, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, errors.New("kv status: unexpected type")
	}
	return si.StreamInfo().State.LastSeq, nil
}

// UpdateLogin applies f to a login and stores it only if no one changed it
// meanwhile (compare-and-set on the bucket revision), so a code or refresh
// token is spent exactly once even when two requests race.
func (s *Store) UpdateLogin(ctx context.Context, id string, f func(*Login) error) (*Login, error) {
	l, _, err := s.UpdateLoginRev(ctx, id, f)
	return l, err
}

// UpdateLoginRev is UpdateLogin that also returns the revision written.
func (s *Store) UpdateLoginRev(ctx context.Context, id string, f func(*Login) error) (*Login, uint64, error) {
	for i := 0; i < 10; i++ {
		e, err := s.logins.Get(ctx, id)
		if err != nil {
			return nil, 0, missing(err)
		}
		l := &Login{}
		if err := json.Unmarshal(e.Value(), l); err != nil {
			return nil, 0, err
		}
		if err := f(l); err != nil {
			return nil, 0, err
		}
		b, _ := json.Marshal(l)
		rev, err := s.logins.Update(ctx, id, b, e.Revision())
		if kvcas.Conflict(err) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return l, rev, nil
	}
	return nil, 0, errors.New("login: too many concurrent updates")
}

// RevokeToken ends one token by its jti and returns the bucket revision.
func (s *Store) RevokeToken(ctx context.Context, jti string) (uint64, error) {
	return s.revoked.Put(ctx, jti, []byte{1})
}

// EndSessions ends every sign-in of a user that began before now (a login
// that starts later is unaffected) and returns the bucket revision.
func (s *Store) EndSessions(ctx context.Context, user string) (uint64, error) {
	return s.ended.Put(ctx, user, []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))
}

// EndConsentedSessions ends every sign-in of user through client that was
// made under a consent (Login.Consented) before now: the consent was
// withdrawn, and the access tokens issued under it stop with it.
func (s *Store) EndConsentedSessions(ctx context.Context, user, client string) (uint64, error) {
	return s.ended.Put(ctx, consentEndedKey(user, client), []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))
}

// consentEndedKey is where the ended bucket keeps when user last withdrew
// their consent to client, beside the user's own key.
func consentEndedKey(user, client string) string { return user + "/consent/" + client }

// ConsentWithdrawn is when the login's consent was last withdrawn (Unix
// milliseconds; 0 if never, or for a login made without one).
func (s *Store) ConsentWithdrawn(ctx context.Context, l *Login) (int64, error) {
	if !l.Consented {
		return 0, nil
	}
	return s.endedAt(ctx, consentEndedKey(l.User, l.Client))
}

// Withdrawn reports whether the login was made under a consent that was
// withdrawn since (at withdrawn). The code, not the browser's sign-in it
// came from, is when the consent was used: a new consent counts.
func (l *Login) Withdrawn(withdrawn int64) bool {
	return l.Consented && withdrawn > 0 && l.CodeAt < withdrawn
}

// SessionsEnded is when a user's sign-ins were last ended (Unix
// milliseconds; 0 if never).
func (s *Store) SessionsEnded(ctx context.Context, user string) (int64, error) {
	return s.endedAt(ctx, user)
}

// endedAt reads a time of the ended bucket (0 when it has none).
func (s *Store) endedAt(ctx context.Context, key string) (int64, error) {
	e, err := s.ended.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(e.Value()), 10, 64)
}

// Dead reports whether a login began before its user's sign-ins were ended.
func (l *Login) Dead(ended int64) bool { return ended > 0 && l.Start < ended }

// ErrNotFound: no such login or membership entry (a malformed id included).
// Any other error is the bucket failing.
var ErrNotFound = errors.New("session: no such entry")

// missing maps the bucket's "no such key" answers to ErrNotFound.
func missing(err error) error {
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return fmt.Errorf("%w (%v)", ErrNotFound, err)
	}
	return err
}

// GetLogin reads one login from the bucket.
func (s *Store) GetLogin(ctx context.Context, id string) (*Login, error) {
	e, err := s.logins.Get(ctx, id)
	if err != nil {
		return nil, missing(err)
	}
	l := &Login{}
	return l, json.Unmarshal(e.Value(), l)
}

// GetMembership reads one membership from the bucket.
func (s *Store) GetMembership(ctx context.Context, id string) (*Membership, error) {
	e, err := s.memberships.Get(ctx, id)
	if err != nil {
		return nil, missing(err)
	}
	m := &Membership{}
	return m, json.Unmarshal(e.Value(), m)
}

// View is a local copy of both buckets, kept current by watchers.
type View struct {
	store       *Store
	mu          sync.RWMutex
	logins      map[string]*Login
	memberships map[string]*Membership
	revoked     map[string]bool
	ended       map[string]int64
	cancel      context.CancelFunc
	// applied is the newest revision applied per bucket; changed is closed
	// and replaced whenever one moves, to wake WaitApplied.
	applied map[string]uint64
	changed chan struct{}
}

// Watch starts the watchers and returns once the initial values are loaded.
func (s *Store) Watch(ctx context.Context) (*View, error) {
	wctx, cancel := context.WithCancel(context.Background())
	v := &View{store: s, logins: map[string]*Login{}, memberships: map[string]*Membership{}, revoked: map[string]bool{},
		ended: map[string]int64{}, cancel: cancel, applied: map[string]uint64{}, changed: make(chan struct{})}
	lw, err := s.logins.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	mw, err := s.memberships.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	rw, err := s.revoked.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	ew, err := s.ended.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	ready := make(chan struct{}, 4)
	go v.watch(wctx, LoginsBucket, lw, ready, func(k string, b []byte) {
		var l *Login
		if b != nil {
			l = &Login{}
			if json.Unmarshal(b, l) != nil {
				l = nil
			}
		}
		v.mu.Lock()
		if l == nil {
			delete(v.logins, k)
		} else {
			v.logins[k] = l
		}
		v.mu.Unlock()
	})
	go v.watch(wctx, MembershipsBucket, mw, ready, func(k string, b []byte) {
		var m *Membership
		if b != nil {
			m = &Membership{}
			if json.Unmarshal(b, m) != nil {
				m = nil
			}
		}
		v.mu.Lock()
		if m == nil {
			delete(v.memberships, k)
		} else {
			v.memberships[k] = m
		}
		v.mu.Unlock()
	})
	go v.watch(wctx, RevokedBucket, rw, ready, func(k string, b []byte) {
		v.mu.Lock()
		if b == nil {
			delete(v.revoked, k)
		} else {
			v.revoked[k] = true
		}
		v.mu.Unlock()
	})
	go v.watch(wctx, EndedBucket, ew, ready, func(k string, b []byte) {
		at, err := strconv.ParseInt(string(b), 10, 64)
		v.mu.Lock()
		if b == nil || err != nil {
			delete(v.ended, k)
		} else {
			v.ended[k] = at
		}
		v.mu.Unlock()
	})
	for i := 0; i < 4; i++ {
		select {
		case <-ready:
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
	}
	return v, nil
}

func (v *View) watch(ctx context.Context, bucket string, w jetstream.KeyWatcher, ready chan<- struct{}, apply func(string, []byte)) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // end of the initial values
				ready <- struct{}{}
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				apply(e.Key(), e.Value())
			} else {
				apply(e.Key(), nil)
			}
			v.mu.Lock()
			if e.Revision() > v.applied[bucket] {
				v.applied[bucket] = e.Revision()
				close(v.changed)
				v.changed = make(chan struct{})
			}
			v.mu.Unlock()
		}
	}
}

// Close stops the watchers.
func (v *View) Close() { v.cancel() }

// ErrInactive means the token's login or membership no longer counts.
var ErrInactive = errors.New("login or membership not active")

// WaitApplied waits until the view has applied a bucket's revision rev (or
// the context ends). A service that changed a session answers with that
// revision, and the gateway waits before passing the answer on: the
// caller's next request then sees the change.
func (v *View) WaitApplied(ctx context.Context, bucket string, rev uint64) error {
	for {
		v.mu.RLock()
		done, ch := v.applied[bucket] >= rev, v.changed
		v.mu.RUnlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AppliedHeader names, on a request the gateway forwards, the newest
// memberships-bucket revision its view had applied. A service that keeps
// entries of its own waits until it has applied as much before it trusts
// them: what the gateway already enforces, the service sees too.
const AppliedHeader = "Pinion-Memberships-Applied"

// Applied is the newest revision of a bucket the view has applied.
func (v *View) Applied(bucket string) uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.applied[bucket]
}

// Revoked reports whether one token (by jti) was ended early.
func (v *View) Revoked(jti string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.revoked[jti]
}

// Lookup returns a live login and its membership. A login not yet seen by
// the watcher (issued a moment ago), or seen only before its sign-in chose
// a membership, is read from the bucket directly: no token names a login
// without one, so such a copy is behind (a token used the moment it was
// issued, while the watcher lagged, was refused).
func (v *View) Lookup(ctx context.Context, loginID string) (*Login, string, *Membership, error) {
	v.mu.RLock()
	l := v.logins[loginID]
	v.mu.RUnlock()
	if l == nil || l.Membership == "" {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if l, err = v.store.GetLogin(ctx, loginID); errors.Is(err, ErrNotFound) {
			return nil, "", nil, fmt.Errorf("%w: no such login", ErrInactive)
		} else if err != nil {
			return nil, "", nil, err
		}
	}
	v.mu.RLock()
	ended := v.ended[l.User] // keyed by user reference ("User/<id>")
	withdrawn := v.ended[consentEndedKey(l.User, l.Client)]
	m := v.memberships[l.Membership]
	v.mu.RUnlock()
	switch {
	case l.Revoked:
		return nil, "", nil, fmt.Errorf("%w: login revoked", ErrInactive)
	case l.Dead(ended):
		return nil, "", nil, fmt.Errorf("%w: login began at %d, before the user's sessions ended at %d", ErrInactive, l.Start, ended)
	case l.Withdrawn(withdrawn):
		return nil, "", nil, fmt.Errorf("%w: login made at %d, before the person withdrew their consent at %d", ErrInactive, l.CodeAt, withdrawn)
	}
	if m == nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if m, err = v.store.GetMembership(ctx, l.Membership); errors.Is(err, ErrNotFound) {
			return nil, "", nil, fmt.Errorf("%w: no membership %s", ErrInactive, l.Membership)
		} else if err != nil {
			return nil, "", nil, err
		}
	}
	if !m.Active {
		return nil, "", nil, fmt.Errorf("%w: membership %s inactive", ErrInactive, l.Membership)
	}
	return l, l.Membership, m, nil
}
