package botexec

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhir/resource"
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
	if err := takeAsyncSlot(s.asyncSlots); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			<-s.asyncSlots
		}
	}()
	sc := repo.Scope{Project: r.Principal.Project}
	body, err := resource.Map(newAsyncJob(s.cfg.BaseURL, r, time.Now()))
	if err != nil {
		return nil, err
	}
	job, err := s.repo.Create(ctx, sc, body, repo.WriteOptions{Author: r.Principal.Profile})
	if err != nil {
		return nil, err
	}
	started = true
	go func() {
		defer func() { <-s.asyncSlots }()
		// No request handler's recovery covers this goroutine: a panic in
		// it would end the process, not one request.
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("async bot execution panicked", "job", job.ID, "panic", p)
			}
		}()
		bctx, cancel := context.WithTimeout(context.Background(), asyncTimeout)
		defer cancel()
		resp, err := s.executeNow(bctx, r)
		if err != nil {
			resp = bus.Outcome(fhir.AsError(err))
		}
		cur, err := s.repo.Read(bctx, sc, "AsyncJob", job.ID)
		if err != nil {
			s.log.Error("async job lost", "job", job.ID, "err", err)
			return
		}
		var j resource.AsyncJob
		if err := json.Unmarshal(cur.JSON, &j); err != nil {
			s.log.Error("async job unreadable", "job", job.ID, "err", err)
			return
		}
		completeJob(&j, resp, time.Now())
		m, err := resource.Map(&j)
		if err != nil {
			s.log.Error("async job result not encoded", "job", job.ID, "err", err)
			return
		}
		if _, err := s.repo.Update(bctx, sc, m, repo.WriteOptions{}); err != nil {
			s.log.Error("async job result not stored", "job", job.ID, "err", err)
		}
	}()
	return jobAccepted(s.cfg.BaseURL, job.ID), nil
}

// takeAsyncSlot takes one of the respond-async slots, or refuses at once
// with 503: waiting would hold the caller for work it asked not to wait for.
func takeAsyncSlot(slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
		return fhir.Busy("Too many asynchronous bot executions, try again")
	}
}

// newAsyncJob is the AsyncJob recording a respond-async request at now.
// It holds the bot's answer, which was for its caller: it is kept for the
// caller and the project's admins (access.OwnerTag), as an export's is.
func newAsyncJob(baseURL string, r *bus.Request, now time.Time) *resource.AsyncJob {
	job := &resource.AsyncJob{
		ResourceType: "AsyncJob", Status: "accepted", RequestTime: now.UTC().Format(time.RFC3339Nano),
		Request: baseURL + strings.TrimPrefix(r.Path, "/") + querySuffix(r),
	}
	if r.Principal != nil && r.Principal.Profile != "" {
		job.Meta, _ = json.Marshal(map[string]any{"security": []any{access.OwnerTag(r.Principal.Profile)}})
	}
	return job
}

// jobAccepted is the 202 answer naming the job to poll, in Content-Location
// and in the outcome's diagnostics, as Medplum gives it.
func jobAccepted(baseURL, jobID string) *bus.Response {
	return bus.Accepted(baseURL + "fhir/R4/job/" + jobID + "/status")
}

// completeJob records the execution's answer on its AsyncJob j at now:
// "error" for a status of 400 or more, else "completed"; an outcome as a
// resource, any other answer as responseBody text.
func completeJob(j *resource.AsyncJob, resp *bus.Response, now time.Time) {
	status, param := "completed", resource.Parameter{Name: "responseBody", ValueString: string(resp.Body)}
	if strings.HasPrefix(resp.Header["Content-Type"], "application/fhir+json") && json.Valid(resp.Body) {
		var o struct {
			ResourceType string `json:"resourceType"`
		}
		if json.Unmarshal(resp.Body, &o) == nil && o.ResourceType == "OperationOutcome" {
			param = resource.Parameter{Name: "outcome", Resource: resp.Body}
		}
	}
	if resp.Status >= 400 {
		status = "error"
	}
	j.Status = status
	j.TransactionTime = now.UTC().Format(time.RFC3339Nano)
	j.Output = &resource.Parameters{ResourceType: "Parameters", Parameter: []resource.Parameter{param}}
}

// querySuffix is the request's query as sent, with its "?" ("" for none).
func querySuffix(r *bus.Request) string {
	if r.RawQuery == "" {
		return ""
	}
	return "?" + r.RawQuery
}
