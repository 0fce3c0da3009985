package botexec

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/bus"
)

// botSchedule is what GET .../bot/:botId/schedule answers.
type botSchedule struct {
	// Scheduled says whether the scheduler holds the bot (a schedule in a
	// project with the cron feature, taken up from its last change).
	Scheduled bool `json:"scheduled"`
	// CronString is the schedule it holds (a cronTiming converted).
	CronString string `json:"cronString,omitempty"`
	// Next is the next run it will claim; a run due while every instance
	// was down is due at once.
	Next string `json:"next,omitempty"`
}

// getBotSchedule is GET /admin/projects/:projectId/bot/:botId/schedule, for
// the project's admins: the bot's schedule and next run as the scheduler's
// bucket holds them (what the console shows), not as computed from the Bot,
// so a schedule the scheduler has not taken up, or dropped, shows as such.
func (s *Service) getBotSchedule(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	_, id, err := s.adminBot(ctx, r)
	if err != nil {
		return nil, err
	}
	out := botSchedule{}
	if s.cron == nil || s.cron.kv == nil {
		return bus.JSON(200, out), nil // no JetStream: nothing is scheduled
	}
	e, err := s.cron.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.JSON(200, out), nil
	}
	if err != nil {
		return nil, err
	}
	var ce cronEntry
	if err := json.Unmarshal(e.Value(), &ce); err != nil {
		return nil, err
	}
	out = botSchedule{Scheduled: true, CronString: ce.Spec, Next: ce.Next.UTC().Format(time.RFC3339)}
	return bus.JSON(200, out), nil
}
