package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// Report is what Verify found of a project's chain.
type Report struct {
	Project string `json:"project"`
	// From is the first place checked: 1, or the first after the events
	// retention removed.
	From   int64  `json:"from"`
	Events int64  `json:"events"` // checked and whole, from From on
	Head   Link   `json:"head"`   // the last event found whole
	Whole  bool   `json:"whole"`
	Break  *Break `json:"break,omitempty"`
}

// Break is the first place where the chain is not whole.
type Break struct {
	Seq     int64  `json:"seq"`
	ID      string `json:"id"` // the AuditEvent's id at that place
	Problem string `json:"problem"`
}

// The problems Verify names.
const (
	Edited   = "edited: its digest does not match what is stored"
	Missing  = "missing: deleted, while events after it remain"
	Misplace = "out of place: it does not follow the event before it (reordered or replaced)"
)

// probe is how far past a missing place Verify looks for events that
// should not be there.
const probe = 64

// restarts bounds how often Verify starts again after retention removed
// events under its walk.
const restarts = 3

// Verify walks project's chain from its start (or retention's end) and
// reports the first place where it is not whole.
func Verify(ctx context.Context, r *repo.Repo, project string) (*Report, error) {
	for attempt := 1; ; attempt++ {
		rep, moved, err := verifyOnce(ctx, r, project)
		if err != nil || !moved {
			return rep, err
		}
		if attempt == restarts {
			return nil, fmt.Errorf("audit: retention removed events of %s under %d walks; try again", trailName(project), restarts)
		}
	}
}

// verifyOnce is one walk; moved when it found a place missing that
// retention removed meanwhile (its start moved past it): the walk is to
// start again from the new start.
func verifyOnce(ctx context.Context, r *repo.Repo, project string) (_ *Report, moved bool, _ error) {
	start, err := retained(ctx, r, project)
	if err != nil {
		return nil, false, err
	}
	rep := &Report{Project: project, From: start.Seq + 1, Head: start}
	prev := start
	for seq := start.Seq + 1; ; seq++ {
		id := ID(project, seq)
		res, err := r.Read(ctx, repo.AllProjects, "AuditEvent", id)
		if fhir.Missing(err) || errors.Is(err, fhir.ErrGone) {
			if now, rerr := retained(ctx, r, project); rerr != nil {
				return nil, false, rerr
			} else if now.Seq >= seq {
				return nil, true, nil
			}
			if later, lerr := anyAfter(ctx, r, project, seq); lerr != nil {
				return nil, false, lerr
			} else if later {
				rep.Break = &Break{Seq: seq, ID: id, Problem: Missing}
			}
			break
		}
		if err != nil {
			return nil, false, err
		}
		l, computed, err := linkOf(res.JSON)
		switch {
		case err != nil || l.Digest != computed:
			rep.Break = &Break{Seq: seq, ID: id, Problem: Edited}
		case l.Seq != seq || l.Prev != prev.Digest:
			rep.Break = &Break{Seq: seq, ID: id, Problem: Misplace}
		}
		if rep.Break != nil {
			break
		}
		prev = l
		rep.Events++
		rep.Head = l
	}
	rep.Whole = rep.Break == nil
	return rep, false, nil
}

// anyAfter says whether an event is stored after the missing place seq:
// within probe places of it, or up to the writers' hint.
func anyAfter(ctx context.Context, r *repo.Repo, project string, seq int64) (bool, error) {
	last := seq + probe
	if raw, err := r.Secret(ctx, headKey(project)); err == nil {
		if hint, _ := strconv.ParseInt(string(raw), 10, 64); hint > last {
			last = hint
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	for s := seq + 1; s <= last; s++ {
		_, err := r.Read(ctx, repo.AllProjects, "AuditEvent", ID(project, s))
		if err == nil || errors.Is(err, fhir.ErrGone) {
			return true, nil
		}
		if !fhir.Missing(err) {
			return false, err
		}
	}
	return false, nil
}

// retained is the last event retention removed from project's chain
// (zero when none was): the chain is checked from the one after it.
func retained(ctx context.Context, r *repo.Repo, project string) (Link, error) {
	raw, err := r.Secret(ctx, retainedKey(project))
	if errors.Is(err, store.ErrNotFound) {
		return Link{}, nil
	}
	if err != nil {
		return Link{}, err
	}
	var l Link
	return l, json.Unmarshal(raw, &l)
}

func retainedKey(project string) string { return "audit-retained:" + project }
