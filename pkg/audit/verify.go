package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	// Key is the public key the trail's checkpoints are signed with
	// (KeyText), "" before the first: pin it, and a chain rewritten and
	// signed again under a new key shows.
	Key string `json:"key,omitempty"`
	// Checkpoint is the chain's latest signed checkpoint, when it has one
	// after From.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Next, when set, is where a walk stopped for its time (Limits.Until)
	// before the chain's end: whole so far, to go on from Next.
	Next int64 `json:"next,omitempty"`
}

// Limits bound one walk: where it starts, and until when it runs. The
// zero Limits walk the whole chain.
type Limits struct {
	// After is the last place an earlier walk found whole (its Next, less
	// one): this walk starts after it, from the link stored there.
	After int64
	// Until, when set, is when the walk stops (with Next set) if it has
	// not reached the chain's end: a request's answer must not wait on a
	// chain of millions.
	Until time.Time
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
	// The problems only signed checkpoints show.
	Truncated = "truncated: the chain ends before the place a signed checkpoint holds (events deleted from its end)"
	Rewritten = "rewritten: its digest is not the one a signed checkpoint holds for this place"
	Forged    = "checkpoint forged: a checkpoint of this place is not signed by the trail's key"
)

// minWalk is how many events a bounded walk checks before it may stop.
const minWalk = 100

// restarts bounds how often Verify starts again after retention removed
// events under its walk.
const restarts = 3

// Verify walks project's chain from its start (or retention's end) and
// reports the first place where it is not whole.
func Verify(ctx context.Context, r *repo.Repo, project string) (*Report, error) {
	return VerifyWithin(ctx, r, project, Limits{})
}

// VerifyWithin is Verify bounded by lim: part of a chain at a time.
func VerifyWithin(ctx context.Context, r *repo.Repo, project string, lim Limits) (*Report, error) {
	for attempt := 1; ; attempt++ {
		rep, moved, err := verifyOnce(ctx, r, project, lim)
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
func verifyOnce(ctx context.Context, r *repo.Repo, project string, lim Limits) (_ *Report, moved bool, _ error) {
	start, err := retained(ctx, r, project)
	if err != nil {
		return nil, false, err
	}
	tr := r.NewTrailReader()
	if lim.After > start.Seq {
		// Go on from the link stored at After, an earlier walk's last whole
		// place, once it is whole itself.
		raw, err := tr.Event(ctx, project, lim.After)
		switch {
		case errors.Is(err, fhir.ErrGone): // deleted underneath since
			return &Report{Project: project, From: lim.After, Break: &Break{Seq: lim.After, ID: ID(project, lim.After), Problem: Missing}}, false, nil
		case fhir.Missing(err):
			return nil, false, fhir.BadRequest("No event to go on from: from must be the next of an earlier answer", "from")
		case err != nil:
			return nil, false, err
		}
		l, computed, err := linkOf(raw)
		if err != nil || l.Digest != computed || l.Seq != lim.After {
			rep := &Report{Project: project, From: lim.After, Break: &Break{Seq: lim.After, ID: ID(project, lim.After), Problem: Edited}}
			return rep, false, nil
		}
		start = l
	}
	rep := &Report{Project: project, From: start.Seq + 1, Head: start}
	key, err := PublicKey(ctx, r)
	if err != nil {
		return nil, false, err
	}
	rep.Key = KeyText(key)
	// Read before the walk: the writers sign only what they have stored.
	latest, _, err := readCheckpoint(ctx, r, latestKey(project))
	if err != nil {
		return nil, false, err
	}
	if latest != nil && latest.Seq > start.Seq {
		rep.Checkpoint = latest
	}
	// vouched checks l, found at seq, against the checkpoints of seq.
	vouched := func(seq int64, l Link) (string, error) {
		cps := []*Checkpoint{}
		if rep.Checkpoint != nil && rep.Checkpoint.Seq == seq {
			cps = append(cps, rep.Checkpoint)
		}
		if seq%anchorEvery == 0 {
			a, _, err := readCheckpoint(ctx, r, anchorKey(project, seq))
			if err != nil {
				return "", err
			}
			if a != nil {
				cps = append(cps, a)
			}
		}
		for _, c := range cps {
			switch {
			case !c.valid(key) || c.Seq != seq || c.Project != project:
				return Forged, nil
			case c.Digest != l.Digest:
				return Rewritten, nil
			}
		}
		return "", nil
	}
	prev := start
	for seq := start.Seq + 1; ; seq++ {
		// Each walk goes some way, however short its time: a caller going on
		// from Next always reaches the end.
		if rep.Events >= minWalk && !lim.Until.IsZero() && time.Now().After(lim.Until) {
			rep.Next = seq
			break
		}
		id := ID(project, seq)
		raw, err := tr.Event(ctx, project, seq)
		if fhir.Missing(err) {
			if now, rerr := retained(ctx, r, project); rerr != nil {
				return nil, false, rerr
			} else if now.Seq >= seq {
				return nil, true, nil
			}
			if later, lerr := anyAfter(ctx, r, project, seq); lerr != nil {
				return nil, false, lerr
			} else if later {
				rep.Break = &Break{Seq: seq, ID: id, Problem: Missing}
			} else if rep.Break, err = truncated(ctx, r, project, key, rep.Checkpoint, seq); err != nil {
				return nil, false, err
			}
			break
		}
		if err != nil {
			return nil, false, err
		}
		l, computed, err := linkOf(raw)
		switch {
		case err != nil || l.Digest != computed:
			rep.Break = &Break{Seq: seq, ID: id, Problem: Edited}
		case l.Seq != seq || l.Prev != prev.Digest:
			rep.Break = &Break{Seq: seq, ID: id, Problem: Misplace}
		}
		if rep.Break != nil {
			break
		}
		if problem, err := vouched(seq, l); err != nil {
			return nil, false, err
		} else if problem != "" {
			rep.Break = &Break{Seq: seq, ID: id, Problem: problem}
			break
		}
		prev = l
		rep.Events++
		rep.Head = l
	}
	rep.Whole = rep.Break == nil && rep.Next == 0
	return rep, false, nil
}

// truncated is the break of a chain that ends before end (the first
// place not taken) although a checkpoint holds a place after it: the
// latest, or the anchor after end. nil when none does.
func truncated(ctx context.Context, r *repo.Repo, project string, key ed25519.PublicKey, latest *Checkpoint, end int64) (*Break, error) {
	anchor, _, err := readCheckpoint(ctx, r, anchorKey(project, (end+anchorEvery-1)/anchorEvery*anchorEvery))
	if err != nil {
		return nil, err
	}
	for _, c := range []*Checkpoint{latest, anchor} {
		if c == nil || c.Seq < end {
			continue
		}
		if !c.valid(key) || c.Project != project {
			return &Break{Seq: c.Seq, ID: ID(project, c.Seq), Problem: Forged}, nil
		}
		return &Break{Seq: end, ID: ID(project, end), Problem: Truncated}, nil
	}
	return nil, nil
}

// anyAfter says whether an event is stored after the missing place seq.
func anyAfter(ctx context.Context, r *repo.Repo, project string, seq int64) (bool, error) {
	last, err := r.LastTrailBlock(ctx, project)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return last.Last() > seq, nil
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

func retainedKey(project string) string { return "audit-trail-retained:" + project }
