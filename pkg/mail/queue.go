package mail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/saga"
)

// Queue puts m on the durable e-mail queue: the one way any service sends
// an e-mail. The queue keeps one copy per m.ID and content, so a retried
// step queues it once; but a step run again that made a new link (a
// set-password secret, which spends the one queued before) queues its new
// e-mail, rather than leave the person only the dead link.
func Queue(ctx context.Context, js jetstream.JetStream, m Message) error {
	b, _ := json.Marshal(m)
	sum := sha256.Sum256(b)
	return saga.Publish(ctx, js, Subject, b, "mail:"+m.ID+":"+hex.EncodeToString(sum[:8]))
}

// Consumer is the queue's durable consumer. Its name is the one it had
// when the membership service owned it: a new name would be a new
// consumer, which would send the queue's kept messages again.
const Consumer = "membership-mail"

// Courier sends the queued e-mails, and records on its invite how an
// invitation's went (Message.InviteID).
type Courier struct {
	sender  Sender
	invites *invite.Store
	log     *slog.Logger
}

// NewCourier sends with sender and records on invites.
func NewCourier(sender Sender, invites *invite.Store, log *slog.Logger) *Courier {
	if log == nil {
		log = slog.Default()
	}
	return &Courier{sender: sender, invites: invites, log: log}
}

// Consume sends the queue's e-mails until stop is called: one durable
// consumer, shared by every instance that runs it.
func (c *Courier) Consume(ctx context.Context, js jetstream.JetStream) (stop func(), err error) {
	return saga.Consume(ctx, js, Consumer, Subject, c.send, c.dropped, c.log)
}

// send is the queue's handler. A failure is retried from the queue; it
// never fails the invite, whose record shows the e-mail's state.
func (c *Courier) send(ctx context.Context, data []byte) error {
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return saga.Permanent(err)
	}
	where, err := c.sender.Send(ctx, m)
	if err != nil {
		if m.InviteID != "" {
			_, _ = c.invites.Update(ctx, m.InviteID, func(r *invite.Record) error {
				st := r.Steps[invite.StepEmail]
				st.Attempts++
				st.Error = err.Error()
				r.Steps[invite.StepEmail] = st
				return nil
			})
		}
		return err
	}
	c.log.Info("e-mail sent", "to", m.To, "subject", m.Subject, "where", where)
	if m.InviteID != "" {
		if _, err := c.invites.Update(ctx, m.InviteID, func(r *invite.Record) error {
			invite.MarkStep(r, invite.StepEmail, "done", "")
			return nil
		}); err != nil {
			c.log.Warn("record e-mail sent", "invite", m.InviteID, "err", err)
		}
	}
	return nil
}

// dropped records an e-mail that could not be sent after every retry.
func (c *Courier) dropped(ctx context.Context, data []byte, err error) {
	var m Message
	if json.Unmarshal(data, &m) != nil || m.InviteID == "" {
		c.log.Error("e-mail dropped after retries", "err", err)
		return
	}
	_, _ = c.invites.Update(ctx, m.InviteID, func(r *invite.Record) error {
		invite.MarkStep(r, invite.StepEmail, "failed", err.Error())
		return nil
	})
}
