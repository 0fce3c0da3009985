package botexec

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
	"github.com/pinion-health/pinion/services/botexec/subscriptions"
)

// scheduledSystem codes the AuditEvent.subtype of a scheduled run.
const scheduledSystem = "urn:pinion:bot-trigger"

// maxAuditLog bounds the console text kept in an AuditEvent (Medplum's 10 KiB).
const maxAuditLog = 10 << 10

// audit records one execution as an AuditEvent, after the answer: writing it
// never delays the caller, and a failure to write is logged, not lost.
// The bot's auditEventTrigger and auditEventDestination choose, as in
// Medplum, whether it is recorded and where: as an AuditEvent resource
// (the default) and/or as a log line.
func (s *Service) audit(b *bot, requester, runAs *bus.Principal, start time.Time, res *sandbox.Result, secrets map[string]any, subscription string, scheduled time.Time) {
	ev := auditRecord(b, requester, runAs, start, time.Now(), res, secrets)
	if !b.audited(ev.Outcome == "0", ev.OutcomeDesc) {
		return
	}
	if subscription != "" {
		// As Medplum: the subscription that ran the bot is an entity too.
		ev.Entity = append(ev.Entity, subscriptions.SubscriberEntity(subscription))
	}
	if !scheduled.IsZero() {
		// Medplum's AuditEvent does not say what started a run; this
		// says a schedule did, and for which tick.
		ev.Subtype = []resource.Coding{{System: scheduledSystem, Code: "scheduled", Display: "Scheduled run due " + scheduled.UTC().Format(time.RFC3339)}}
	}
	for _, dest := range b.destinations() {
		switch dest {
		case "resource":
			s.queueAudit(auditEvent{project: b.Project, bot: b.ID, ev: ev})
		case "log":
			// Logged as the map it is stored as, so the line reads as before.
			s.log.Info("bot execution", "bot", b.ID, "project", b.Project, "auditEvent", ev.Map())
		}
	}
}

// audited is Medplum's auditEventTrigger: always (the default), never,
// on-error, or on-output (when the run logged something).
func (b *bot) audited(ok bool, output string) bool {
	switch b.AuditTrigger {
	case "never":
		return false
	case "on-error":
		return !ok
	case "on-output":
		return output != ""
	}
	return true
}

// destinations is auditEventDestination, ["resource"] when unset.
func (b *bot) destinations() []string {
	if len(b.AuditDestination) == 0 {
		return []string{"resource"}
	}
	return b.AuditDestination
}

// queueAudit hands an AuditEvent to the writers; a full queue drops it,
// saying so, rather than hold up an execution or a delivery.
func (s *Service) queueAudit(a auditEvent) {
	select {
	case s.audits <- a:
	default:
		s.log.Error("audit queue full: audit event dropped", "bot", a.bot, "outcome", a.ev.Outcome)
	}
}

// auditRecord is the AuditEvent of one execution from start to end, as
// Medplum writes it: outcome 0 (success) or 4 (the bot failed), and the
// console log, with any error and secrets masked, as outcomeDesc.
func auditRecord(b *bot, requester, runAs *bus.Principal, start, end time.Time, res *sandbox.Result, secrets map[string]any) *resource.AuditEvent {
	outcome, desc := "0", res.Log
	if res.Err != nil {
		outcome = "4"
		desc += "\nError: " + res.Err.Message
	}
	desc = maskSecrets(desc, secrets)
	if len(desc) > maxAuditLog {
		desc = desc[len(desc)-maxAuditLog:] // the tail says how it ended
	}
	end = end.UTC()
	return &resource.AuditEvent{
		ResourceType: "AuditEvent",
		Type:         resource.Coding{System: "https://medplum.com/CodeSystem/audit-event", Code: "execute"},
		Recorded:     end.Format(time.RFC3339Nano),
		Period:       &resource.Period{Start: start.UTC().Format(time.RFC3339Nano), End: end.Format(time.RFC3339Nano)},
		Outcome:      outcome,
		OutcomeDesc:  desc,
		Agent: []resource.AuditAgent{
			{Who: &resource.Reference{Reference: requester.Profile}, Requestor: true},
			{Who: &resource.Reference{Reference: runAs.Profile}, Requestor: false},
		},
		Source: &resource.AuditSource{Observer: resource.Reference{Reference: "Bot/" + b.ID}},
		Entity: []resource.AuditEntity{{
			What: resource.Reference{Reference: "Bot/" + b.ID},
			Role: resource.Coding{System: "http://terminology.hl7.org/CodeSystem/object-role", Code: "4", Display: "Domain Resource"},
		}},
	}
}

// auditEvent is one queued AuditEvent: a bot run's or a subscription
// delivery's.
type auditEvent struct {
	project, bot string
	ev           *resource.AuditEvent
}

// auditQueue bounds the audit events waiting to be written. Writers take
// them in batches (one insert per batch and project), so a burst of
// executions turns into a few writes rather than a write each.
//
// A writer that has one event waits up to auditLinger for more: each
// commit writes every index page its events touch, and the events of a
// burst share those pages (the same bot, type and outcome), so one commit
// of a hundred costs little more than one of ten.
const (
	auditQueue   = 16384
	auditBatch   = 500
	auditWriters = 2
	auditLinger  = 50 * time.Millisecond
)

// writeAudits writes queued audit events in batches; once told to quit it
// writes what is still queued and returns. (The queue is never closed: a
// late execution may still send to it.)
func (s *Service) writeAudits() {
	defer s.auditWG.Done()
	for {
		var batch []auditEvent
		select {
		case a := <-s.audits:
			batch = append(batch, a)
		case <-s.auditQuit:
			for {
				batch = s.drain(batch[:0])
				if len(batch) == 0 {
					return
				}
				s.writeBatch(batch)
			}
		}
		s.writeBatch(s.gather(batch))
	}
}

// gather adds what comes within auditLinger, up to a batch; told to quit,
// it stops waiting.
func (s *Service) gather(batch []auditEvent) []auditEvent {
	t := time.NewTimer(auditLinger)
	defer t.Stop()
	for len(batch) < auditBatch {
		select {
		case a := <-s.audits:
			batch = append(batch, a)
		case <-t.C:
			return batch
		case <-s.auditQuit:
			return s.drain(batch)
		}
	}
	return batch
}

// drain adds what is queued now, up to a batch.
func (s *Service) drain(batch []auditEvent) []auditEvent {
	for len(batch) < auditBatch {
		select {
		case a := <-s.audits:
			batch = append(batch, a)
		default:
			return batch
		}
	}
	return batch
}

// writeBatch writes a batch with one insert per project.
func (s *Service) writeBatch(batch []auditEvent) {
	for project, evs := range byProject(batch) {
		list := make([]map[string]any, len(evs))
		for i, ev := range evs {
			list[i] = ev.Map()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.repo.CreateMany(ctx, repo.Scope{Project: project}, "AuditEvent", list, repo.WriteOptions{Project: project}); err != nil {
			s.log.Error("bot audit events not written", "project", project, "count", len(list), "err", err)
		}
		cancel()
	}
}

// byProject groups a batch's events by project, in the batch's order.
func byProject(batch []auditEvent) map[string][]*resource.AuditEvent {
	out := map[string][]*resource.AuditEvent{}
	for _, a := range batch {
		out[a.project] = append(out[a.project], a.ev)
	}
	return out
}

// maskSecrets hides every secret value that appears in a log, as written
// or as JSON.stringify escapes it. Booleans and values under four
// characters are left: masking them would garble the whole log.
func maskSecrets(text string, secrets map[string]any) string {
	for _, sec := range secrets {
		m, _ := sec.(map[string]any)
		for k, v := range m {
			var s string
			switch x := v.(type) {
			case string:
				s = x
			case float64:
				s = strconv.FormatFloat(x, 'f', -1, 64) // as JavaScript prints it
			default:
				continue
			}
			if !strings.HasPrefix(k, "value") || len(s) < 4 {
				continue
			}
			text = strings.ReplaceAll(text, s, "****")
			if esc := jsonEscaped(s); esc != s {
				text = strings.ReplaceAll(text, esc, "****")
			}
		}
	}
	return text
}

// jsonEscaped is s as it appears inside a JSON.stringify string.
func jsonEscaped(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // JavaScript leaves <, > and & alone
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}
