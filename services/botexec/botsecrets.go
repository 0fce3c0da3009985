package botexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// A bot's own secrets (medplum#7991) are kept in the store's secrets, not
// in the Bot: no read, search, history, export or subscription of the Bot
// carries them, so only the project's admins, through the routes below,
// ever see them. A bot reads them in event.secrets, over the project's
// secrets of the same name, and they are masked in its logs as those are.

// botSecretsKey is where a bot's secrets are kept.
func botSecretsKey(botID string) string { return "Bot/" + botID + "/secrets" }

// setBotSecrets is POST /admin/projects/:projectId/bot/:botId/secrets: an
// array of {name, value[x]}, checked as the project's secrets are, that
// replaces the bot's own (an empty array removes them). Admins only.
func (s *Service) setBotSecrets(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	_, id, err := s.adminBot(ctx, r)
	if err != nil {
		return nil, err
	}
	if !r.IsJSON() {
		return nil, fhir.UnsupportedMediaType()
	}
	// Only an array replaces them: `null` or an object must not clear them.
	if !bytes.HasPrefix(bytes.TrimSpace(r.Body), []byte("[")) {
		return nil, fhir.BadRequest("The body must be a JSON array")
	}
	list, err := projects.ParseSecrets(r.Body)
	if err != nil {
		return nil, err
	}
	var val []byte
	if len(list) > 0 {
		if val, err = json.Marshal(list); err != nil {
			return nil, err
		}
	}
	if err := s.repo.SetSecret(ctx, botSecretsKey(id), val); err != nil {
		return nil, err
	}
	s.botSecrets.Remove(id)
	return botSecretsAnswer(list)
}

// getBotSecrets is GET /admin/projects/:projectId/bot/:botId/secrets, for
// the project's admins.
func (s *Service) getBotSecrets(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	_, id, err := s.adminBot(ctx, r)
	if err != nil {
		return nil, err
	}
	list, err := s.ownSecrets(ctx, id)
	if err != nil {
		return nil, err
	}
	return botSecretsAnswer(list)
}

func botSecretsAnswer(list []any) (*bus.Response, error) {
	if list == nil {
		list = []any{}
	}
	return bus.JSON(200, list), nil
}

// adminBot is the route's project and bot, for an admin of that project
// (403 otherwise) whose bot it is (404 otherwise).
func (s *Service) adminBot(ctx context.Context, r *bus.Request) (string, string, error) {
	project, id := r.Param("projectId"), r.Param("botId")
	if err := access.ProjectAdmin(r.Principal, project); err != nil {
		return "", "", err
	}
	if _, err := s.repo.Read(ctx, repo.Scope{Project: project}, "Bot", id); err != nil {
		if errors.Is(err, fhir.ErrGone) {
			err = fhir.NotFound()
		}
		return "", "", err
	}
	return project, id, nil
}

// ownSecrets is the bot's own list (nil when it has none).
func (s *Service) ownSecrets(ctx context.Context, botID string) ([]any, error) {
	raw, err := s.repo.Secret(ctx, botSecretsKey(botID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []any
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// A run reuses a bot's own secrets for botSecretsTTL: most bots have none,
// and reading that from the store cost every run a query. A
// change reaches the next run at once in the executor that made it, and
// within botSecretsTTL in any other (as a bot's identifier does).
const (
	botSecretsTTL = 5 * time.Second
	maxBotSecrets = 10_000
)

// runSecrets is a run's event.secrets: the project's, with the bot's own
// in place of any of the same name.
func (s *Service) runSecrets(ctx context.Context, b *bot) (map[string]any, error) {
	shared, err := s.secrets(ctx, b.Project)
	if err != nil {
		return nil, err
	}
	own, ok := s.botSecrets.Get(b.ID)
	if !ok {
		if own, err = s.ownSecrets(ctx, b.ID); err != nil {
			return nil, err
		}
		s.botSecrets.Add(b.ID, own)
	}
	if len(own) == 0 {
		return shared, nil
	}
	// The project's map is shared by every run of the project: copied.
	out := maps.Clone(shared)
	for _, sec := range own {
		m, _ := sec.(map[string]any)
		if name, _ := m["name"].(string); name != "" {
			out[name] = m
		}
	}
	return out, nil
}
