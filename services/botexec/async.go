package botexec

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// asyncTimeout bounds a respond-async execution (the bot's own timeout is
// shorter; this covers the lookup and the writes around it).
const asyncTimeout = 16 * time.Minute

// maxAsync bounds the respond-async executions one instance runs at once:
// they outlive their requests, so the bus's in-flight bound does not see
// them.
const maxAsync = 64

// wantsAsync reports Prefer: respond-async.
func wantsAsync(r *bus.Request) bool {
	return strings.Contains(strings.ToLower(r.Get("Prefer")), "respond-async")
}

// executeAsync answers 202 at once with the job to poll, and runs the
// execution in the background, recording its answer on an AsyncJob (the
// output Medplum gives: responseBody, or the outcome). A job whose process
// dies before it ends stays "accepted".
func (s *Service) executeAsync(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	select {
	case s.asyncSlots <- struct{}{}:
	default:
		return nil, fhir.Busy("Too many asynchronous bot executions, try again")
	}
	started := false
	defer func() {
		if !started {
			<-s.asyncSlots
		}
	}()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	sc := repo.Scope{Project: r.Principal.Project}
	job, err := s.repo.Create(ctx, sc, map[string]any{
		"resourceType": "AsyncJob", "status": "accepted", "requestTime": now,
		"request": s.cfg.BaseURL + strings.TrimPrefix(r.Path, "/") + query(r),
	}, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	started = true
	go func() {
		defer func() { <-s.asyncSlots }()
		bctx, cancel := context.WithTimeout(context.Background(), asyncTimeout)
		defer cancel()
		resp, err := s.executeNow(bctx, r)
		if err != nil {
			resp = bus.Outcome(fhir.AsError(err))
		}
		status, param := "completed", map[string]any{"name": "responseBody", "valueString": string(resp.Body)}
		if strings.HasPrefix(resp.Header["Content-Type"], "application/fhir+json") && json.Valid(resp.Body) {
			// A decoded map, not raw bytes: the job is validated as a Go value.
			var o map[string]any
			if json.Unmarshal(resp.Body, &o) == nil && o["resourceType"] == "OperationOutcome" {
				param = map[string]any{"name": "outcome", "resource": o}
			}
		}
		if resp.Status >= 400 {
			status = "error"
		}
		cur, err := s.repo.Read(bctx, sc, "AsyncJob", job.ID)
		if err != nil {
			s.log.Error("async job lost", "job", job.ID, "err", err)
			return
		}
		j, _ := cur.Decode()
		j["status"] = status
		j["transactionTime"] = time.Now().UTC().Format(time.RFC3339Nano)
		j["output"] = map[string]any{"resourceType": "Parameters", "parameter": []any{param}}
		if _, err := s.repo.Update(bctx, sc, j, repo.WriteOptions{}); err != nil {
			s.log.Error("async job result not stored", "job", job.ID, "err", err)
		}
	}()
	e := fhir.Accepted(s.cfg.BaseURL + "fhir/R4/job/" + job.ID + "/status")
	resp := bus.Outcome(e)
	resp.Header["Content-Location"] = e.Outcome.Issue[0].Diagnostics
	return resp, nil
}

func query(r *bus.Request) string {
	if r.RawQuery == "" {
		return ""
	}
	return "?" + r.RawQuery
}
