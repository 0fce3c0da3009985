package invite

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pinion-health/pinion/pkg/saga"
)

// Step is one step of the invite saga.
type Step struct {
	Name     string // its key in Record.Steps
	Service  string // the service that runs it
	Subject  string // where its work is published
	Consumer string // the durable consumer every instance of Service shares
	// Does is what the step writes; Undo is what becomes of that when a
	// later step fails the invite (the saga's compensation).
	Does, Undo string
	// Skip says when a request has no use for the step; nil: never.
	Skip func(Request) bool
}

// Starter is the service that records an invite and publishes its first
// step, then waits for the end (DoneSubject).
const Starter = "membership"

// Saga is the invite, step by step, in order: the one map of it. Each
// service runs its steps with Run, every step hands over to the next with
// Advance, and a new record lists them all (NewRecord), so this table is
// what the code does.
//
// No step's work is undone. Each step's ids derive from the invite's, so a
// step delivered again finds its own earlier work; and what a failed
// invite leaves (a User, a profile) is what the next invite of the same
// person finds and reuses, as Medplum's invite reuses them.
var Saga = []Step{
	{
		Name: StepUser, Service: "identity", Subject: SubjUser, Consumer: "identity-invite-user",
		Does: "finds the User with the invitee's e-mail in the invite's scope, or creates one (claiming the address)",
		Undo: "kept: the next invite of the address finds it",
	},
	{
		Name: StepProfile, Service: "fhir", Subject: SubjProfile, Consumer: "fhir-invite-profile",
		Does: "finds the project's profile of that type with the invitee's e-mail, or creates one",
		Undo: "kept: the next invite reuses it",
	},
	{
		Name: StepMembership, Service: "membership", Subject: SubjMembership, Consumer: "membership-invite-membership",
		Does: "creates the ProjectMembership (or, with upsert, updates the person's) and marks the invite done",
		Undo: "none: the last step that can fail the invite",
	},
	{
		Name: StepEmail, Service: "identity", Subject: SubjEmail, Consumer: "identity-invite-email",
		Does: "queues the invitation e-mail, with a set-password link for a new user, and announces the end; the mail courier marks it done once sent",
		Undo: "none: a failure is recorded on the invite, which stays done",
		Skip: func(r Request) bool { return !r.SendEmail || r.Email == "" },
	},
}

// step is the named step of Saga.
func step(name string) (int, Step) {
	for i, st := range Saga {
		if st.Name == name {
			return i, st
		}
	}
	panic("invite: no step " + name) // a typo in a service, found by its first test
}

// NewRecord is the record of a new invite: every step of Saga to do, but
// those the request skips.
func NewRecord(id string, req Request, now time.Time) *Record {
	rec := &Record{ID: id, Request: req, Status: "pending", Created: now, Updated: now, Steps: map[string]StepState{}}
	for _, st := range Saga {
		state := "pending"
		if st.Skip != nil && st.Skip(req) {
			state = "skipped"
		}
		rec.Steps[st.Name] = StepState{State: state}
	}
	return rec
}

// Begin publishes an invite's first step.
func (s *Store) Begin(ctx context.Context, id string) error {
	return s.Next(ctx, Saga[0].Subject, Message{InviteID: id})
}

// Advance hands an invite over from the step after: it publishes the next
// step still to do (neither skipped nor done already by an earlier
// delivery), or, when none is left, announces the end to whoever waits.
func (s *Store) Advance(ctx context.Context, rec *Record, after string) error {
	i, _ := step(after)
	for _, next := range Saga[i+1:] {
		if rec.Steps[next.Name].State == "pending" {
			return s.Next(ctx, next.Subject, Message{InviteID: rec.ID})
		}
	}
	Announce(s.js.Conn(), rec.ID, rec)
	return nil
}

// Run consumes the named step with h until the returned stop; a step that
// fails for good fails its invite (Fail).
func (s *Store) Run(ctx context.Context, name string, h saga.Handler, log *slog.Logger) (stop func(), err error) {
	_, st := step(name)
	stop, err = saga.Consume(ctx, s.js, st.Consumer, st.Subject, h, func(ctx context.Context, data []byte, cause error) {
		Fail(ctx, s, s.js.Conn(), data, st.Name, cause, log)
	}, log)
	if err != nil {
		return nil, fmt.Errorf("invite step %s: %w", name, err)
	}
	return stop, nil
}
