// Package invite is the shared model of the invite saga (POST
// /admin/projects/{projectId}/invite, E2 in docs/API.md): its map (Saga in
// saga.go: the steps in order, which service runs each, what each writes
// and what becomes of it on a later failure), the request, and the record
// of its progress kept in a NATS key-value bucket. Membership starts an
// invite and waits for its end; each service runs its steps with Run.
package invite

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/kvcas"
	"github.com/pinion-health/pinion/pkg/saga"
)

// Step subjects, in saga order (Saga says who runs each).
const (
	SubjUser       = saga.SubjectPrefix + "invite.user"
	SubjProfile    = saga.SubjectPrefix + "invite.profile"
	SubjMembership = saga.SubjectPrefix + "invite.membership"
	SubjEmail      = saga.SubjectPrefix + "invite.email"
)

// Step names, as they appear in Record.Steps.
const (
	StepUser       = "user"
	StepProfile    = "profile"
	StepMembership = "membership"
	StepEmail      = "email"
)

// DoneSubject is where the end of an invite is announced (core NATS), for
// the HTTP request waiting on it.
func DoneSubject(id string) string { return "pinion.invite.done." + id }

// Bucket keeps invite records.
const Bucket = "pinion_invites"

// Request is a validated invite.
type Request struct {
	ProjectID     string `json:"projectId"`
	ProjectName   string `json:"projectName"`
	ResourceType  string `json:"resourceType"`
	FirstName     string `json:"firstName"`
	LastName      string `json:"lastName"`
	Email         string `json:"email,omitempty"`
	ExternalID    string `json:"externalId,omitempty"`
	ProjectScoped bool   `json:"projectScoped"`
	// PasswordHash is the argon2id hash of an initial password, if one was given.
	PasswordHash string         `json:"passwordHash,omitempty"`
	SendEmail    bool           `json:"sendEmail"`
	Membership   map[string]any `json:"membership"` // template: admin, access, accessPolicy, externalId, invitedBy
	Profile      string         `json:"profile,omitempty"`
	// Patient is the Patient a RelatedPerson profile relates to (required by FHIR).
	Patient            string `json:"patient,omitempty"`
	Upsert             bool   `json:"upsert,omitempty"`
	ForceNewMembership bool   `json:"forceNewMembership,omitempty"`
	InvitedBy          string `json:"invitedBy,omitempty"`
	// MFARequired: the user must have a second factor to sign in
	// (Medplum's InviteRequest.mfaRequired).
	MFARequired bool `json:"mfaRequired,omitempty"`
}

// StepState is one step's progress.
type StepState struct {
	State    string    `json:"state"` // pending, done, failed, skipped
	Attempts int       `json:"attempts,omitempty"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at,omitempty"`
}

// Failure is why an invite failed: the failing step's error kept whole
// (status, OperationOutcome with its expressions, headers), so the caller
// gets it as the step made it.
type Failure struct {
	Status  int                    `json:"status"`
	Outcome *fhir.OperationOutcome `json:"outcome,omitempty"`
	Header  map[string]string      `json:"header,omitempty"`
	// Text is all that a record written before outcomes were kept holds.
	Text string `json:"text,omitempty"`
}

// NewFailure is the failure of a step that ended with err: a *fhir.Error
// (even wrapped) as it is, anything else a 500 that reveals nothing.
func NewFailure(err error) *Failure {
	fe := fhir.AsError(err)
	o := fe.Outcome
	return &Failure{Status: fe.Status, Outcome: &o, Header: fe.Header}
}

// Err is the failure as the invite's answer.
func (f *Failure) Err() *fhir.Error {
	if f.Outcome == nil {
		return &fhir.Error{Status: f.Status, Outcome: fhir.OperationOutcome{ResourceType: "OperationOutcome",
			Issue: []fhir.Issue{{Severity: "error", Code: "processing", Details: &fhir.Text{Text: f.Text}}}}}
	}
	return &fhir.Error{Status: f.Status, Outcome: *f.Outcome, Header: f.Header}
}

// Record is an invite's state.
type Record struct {
	ID           string               `json:"id"`
	Request      Request              `json:"request"`
	Status       string               `json:"status"` // pending, done, failed
	Steps        map[string]StepState `json:"steps"`
	UserID       string               `json:"userId,omitempty"`
	NewUser      bool                 `json:"newUser,omitempty"`
	ProfileRef   string               `json:"profile,omitempty"`
	MembershipID string               `json:"membershipId,omitempty"`
	Failure      *Failure             `json:"failure,omitempty"`
	Created      time.Time            `json:"created"`
	Updated      time.Time            `json:"updated"`

	// rev is the bucket revision the record was read or written at, so a
	// step that read it can write it without reading it again (Save).
	rev uint64
}

// Ended is what the end of an invite tells whoever waits for it: its
// outcome, without the request (which holds a password hash).
func (r *Record) Ended() *Record {
	return &Record{ID: r.ID, Status: r.Status, MembershipID: r.MembershipID, Failure: r.Failure,
		Steps: map[string]StepState{StepMembership: r.Steps[StepMembership]}}
}

// Message is the payload of a step: which invite. Each step reads the rest
// from the record.
type Message struct {
	InviteID string `json:"invite"`
}

// Store reads and writes invite records.
type Store struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
}

// Open creates the bucket and the step stream if needed.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	if err := saga.EnsureStream(ctx, js); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:  Bucket,
		History: 1,
		Storage: jetstream.FileStorage,
		TTL:     30 * 24 * time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv, js: js}, nil
}

// Create stores a new record.
func (s *Store) Create(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	rev, err := s.kv.Create(ctx, r.ID, b)
	if err != nil {
		return err
	}
	r.rev = rev
	return nil
}

// Get reads a record.
func (s *Store) Get(ctx context.Context, id string) (*Record, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	r := &Record{}
	if err := json.Unmarshal(e.Value(), r); err != nil {
		return nil, err
	}
	r.rev = e.Revision()
	return r, nil
}

// Update applies f to the current record and stores it if no one else
// changed it meanwhile, retrying on a concurrent change.
func (s *Store) Update(ctx context.Context, id string, f func(*Record) error) (*Record, error) {
	return s.update(ctx, id, nil, f)
}

// Save is Update for a step that has read the record (Load): f changes rec
// itself, which is stored at the revision it was read at, and only when
// someone changed the record since is it read again.
func (s *Store) Save(ctx context.Context, rec *Record, f func(*Record) error) (*Record, error) {
	return s.update(ctx, rec.ID, rec, f)
}

func (s *Store) update(ctx context.Context, id string, r *Record, f func(*Record) error) (*Record, error) {
	for range 20 {
		if r == nil {
			var err error
			if r, err = s.Get(ctx, id); err != nil {
				return nil, fmt.Errorf("invite %s: %w", id, err)
			}
		}
		if err := f(r); err != nil {
			return nil, err
		}
		r.Updated = time.Now().UTC()
		b, _ := json.Marshal(r)
		rev, err := s.kv.Update(ctx, id, b, r.rev)
		if kvcas.Conflict(err) {
			r = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("invite %s: %w", id, err)
		}
		r.rev = rev
		return r, nil
	}
	return nil, fmt.Errorf("invite %s: too many concurrent updates", id)
}

// Next publishes the step that follows, idempotently per invite and step.
func (s *Store) Next(ctx context.Context, subject string, m Message) error {
	b, _ := json.Marshal(m)
	return saga.Publish(ctx, s.js, subject, b, m.InviteID+":"+subject)
}

// MarkStep records a step's state.
func MarkStep(r *Record, step, state, errText string) {
	st := r.Steps[step]
	st.State, st.Error, st.At = state, errText, time.Now().UTC()
	if state != "pending" {
		st.Attempts++
	}
	r.Steps[step] = st
}

// Fail marks the invite of a dead step failed, with the step's error
// (NewFailure), and announces the end to whoever waits.
func Fail(ctx context.Context, s *Store, nc *nats.Conn, data []byte, step string, cause error, log *slog.Logger) {
	var m Message
	if json.Unmarshal(data, &m) != nil {
		return
	}
	f := NewFailure(cause)
	rec, err := s.Update(ctx, m.InviteID, func(r *Record) error {
		MarkStep(r, step, "failed", cause.Error())
		if r.Status == "pending" {
			r.Status, r.Failure = "failed", f
		}
		return nil
	})
	if err != nil {
		log.Error("mark invite failed", "invite", m.InviteID, "err", err)
	}
	Announce(nc, m.InviteID, rec)
}

// Announce tells whoever waits for an invite that it has ended, with its
// outcome (rec.Ended), so the waiter need not read the record; with rec
// nil, only that it ended, and the waiter reads the record.
func Announce(nc *nats.Conn, id string, rec *Record) {
	var b []byte
	if rec != nil {
		b, _ = json.Marshal(rec.Ended())
	}
	_ = nc.Publish(DoneSubject(id), b)
}

// Announced reads an announcement: the invite's outcome, or nil when it
// does not say.
func Announced(data []byte) *Record {
	r := &Record{}
	if len(data) == 0 || json.Unmarshal(data, r) != nil || r.ID == "" {
		return nil
	}
	return r
}

// Load reads a step's message and its invite. pending is false when the
// invite has already ended (done or failed): the step then has nothing to
// do. A message that cannot be read is a permanent failure.
func (s *Store) Load(ctx context.Context, data []byte) (m Message, rec *Record, pending bool, err error) {
	if err := json.Unmarshal(data, &m); err != nil {
		return m, nil, false, saga.Permanent(err)
	}
	if rec, err = s.Get(ctx, m.InviteID); err != nil {
		return m, nil, false, err
	}
	return m, rec, rec.Status == "pending", nil
}
