package botexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/pkg/subscription"
	"github.com/pinion-health/pinion/services/botexec/subscriptions"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// deliveryBots is what the subscriptions' deliverer asks of the bot
// executor: memberships through the executor's cache, and bot runs on
// its workers.
type deliveryBots struct{ s *Service }

// MemberAs is the principal of a profile's membership of a project,
// with its rights as they stand now.
func (b deliveryBots) MemberAs(ctx context.Context, project, profile string) (*bus.Principal, error) {
	s := b.s
	mid, err := s.membershipID(ctx, project, profile)
	if err != nil {
		return nil, err
	}
	if mid == "" {
		return nil, subscriptions.ErrNoMembership
	}
	m, err := s.sessions.GetMembership(ctx, mid)
	if errors.Is(err, session.ErrNotFound) || err == nil && !m.Active {
		return nil, subscriptions.ErrNoMembership
	}
	if err != nil {
		return nil, err
	}
	return memberPrincipal(mid, m), nil
}

// RunBot runs a subscription's bot with the change as input: as the
// change's author when the bot says runAsUser, else as the bot's own
// membership (Medplum's rules).
func (b deliveryBots) RunBot(ctx context.Context, r *subscriptions.BotRun) error {
	s := b.s
	start := time.Now()
	var err error
	sub := r.Subscription
	if r.Bot == "" {
		if r.Bot, err = b.botByIdentifier(ctx, sub); err != nil {
			return err
		}
	}
	bres, err := s.repo.Read(ctx, repo.Scope{Project: sub.Project}, "Bot", r.Bot)
	if err != nil {
		if fhir.Missing(err) {
			return fmt.Errorf("bot %s not found in the subscription's project", r.Bot)
		}
		return subscriptions.ServerFault(err)
	}
	bt, err := botOf(bres)
	if err != nil {
		return err
	}
	requester := &bus.Principal{Profile: r.Author, Project: bt.Project}
	var runAs *bus.Principal
	if bt.RunAsUser {
		runAs, err = b.MemberAs(ctx, bt.Project, r.Author)
	} else {
		runAs, err = b.MemberAs(ctx, bt.Project, "Bot/"+bt.ID)
	}
	if errors.Is(err, subscriptions.ErrNoMembership) {
		return errors.New("could not find project membership for bot")
	}
	if err != nil {
		return subscriptions.ServerFault(err)
	}
	in, err := r.Input(ctx, runAs)
	if err != nil {
		return subscriptions.ServerFault(err)
	}
	if in == nil {
		s.log.Warn("subscriptions: the bot's membership may not read the change; the bot is not run",
			"subscription", sub.ID, "bot", bt.ID, "resource", r.Resource)
		return nil
	}
	_, err = s.run(ctx, &execution{
		bot: bt, in: &input{kind: worker.InputJSON, body: in.Body, mediaType: "application/fhir+json"},
		requester: requester, runAs: runAs, start: start,
		requestID: uuid.NewString(), contentType: "application/fhir+json", traceID: r.TraceID,
		headers: lowerHeaders(in.Headers), subscription: "Subscription/" + sub.ID, committed: r.Committed,
	})
	if err != nil {
		var fe *fhir.Error
		if errors.As(err, &fe) && fe.Status < 500 && fe.Status != 429 {
			return err // the bot cannot run as it is: retried, then a dead letter
		}
		return subscriptions.ServerFault(err)
	}
	return nil
}

// botByIdentifier resolves a subscription's Bot?identifier= endpoint as
// $execute?identifier= resolves it for its caller, here the
// subscription's author: through the author's access policy (a policy
// that hides Bot.identifier, or grants no read of the bot found, refuses),
// one bot of the project or 404, several 412.
func (b deliveryBots) botByIdentifier(ctx context.Context, sub *subscription.Subscription) (string, error) {
	s := b.s
	ident, _ := sub.BotIdentifier()
	author, err := b.MemberAs(ctx, sub.Project, sub.Author)
	if errors.Is(err, subscriptions.ErrNoMembership) {
		return "", fhir.ForbiddenText("The subscription's author is no longer a member of its project")
	}
	if err != nil {
		return "", subscriptions.ServerFault(err)
	}
	pol, err := s.policies.For(ctx, author)
	if err != nil {
		return "", subscriptions.ServerFault(err)
	}
	id, err := s.botByIdentifier(ctx, pol, sub.Project, ident)
	if err != nil {
		return "", err
	}
	if _, err := s.readBot(ctx, pol, id, access.Read); err != nil {
		return "", err
	}
	return id, nil
}
