package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// retainedState is what a project's retained key holds: the link of the
// last event retention removed, from which Verify, the writers and the
// sinks go on; and, while a removal is under way, what it removes.
type retainedState struct {
	Link
	// From is the first place the latest removal takes, Cutoff the time
	// before which it takes events; Done once they are gone and the
	// removal is recorded in the chain.
	From   int64     `json:"from,omitempty"`
	Cutoff time.Time `json:"cutoff,omitzero"`
	Done   bool      `json:"done,omitempty"`
}

// Removal is what retention removed from a project's chain at once: the
// places From to To, every event recorded before Cutoff.
type Removal struct {
	Project  string
	From, To int64
	Cutoff   time.Time
}

// maxRemoval bounds the events one removal takes; a project with more
// past its retention loses them over several.
const maxRemoval = 10_000

// Retain removes from the start of project's chain every event recorded
// before cutoff, as one removal (at most maxRemoval events: call it again
// while it removes as many), and records a retention event in the same
// chain naming what it removed. It removes only a whole prefix, and stops
// at the first event that does not verify: a break is never removed, so
// Verify goes on reporting it. nil when nothing was removed (or another
// instance removed it first).
//
// Crash safety: the steps go in an order after each of which the chain
// still verifies whole.
//  1. The retained key moves first, to the last event to remove, with
//     the range and Done false. From here on Verify, the writers and the
//     sinks start after it, and the events before it, still stored, are
//     read by nobody: a crash here reports no break. (Removing the
//     events first, as the plain order would, leaves Verify starting at
//     a place already gone: "missing".)
//  2. The events are purged. A crash midway leaves part of them, still
//     before the retained link: no break either.
//  3. The retention event is recorded (Recorder.Record: stored in the
//     stream, the writers chain it).
//  4. The key is marked Done.
//
// A removal found not Done (a crash after step 1) is finished by the next
// call: the purge runs again (it passes over what is gone) and the event
// is recorded again under the same id, which the stream drops as a
// repeat within its two-minute window; later than that it is stored
// twice, which is two events in the chain, not a break.
func Retain(ctx context.Context, r *repo.Repo, rec *Recorder, project string, cutoff time.Time, log *slog.Logger) (*Removal, error) {
	raw, st, err := beginRemoval(ctx, r, project, cutoff, log)
	if err != nil || raw == nil {
		return nil, err
	}
	return finishRemoval(ctx, r, rec, project, raw, st)
}

// beginRemoval is step 1 of Retain: it moves the retained key to the last
// event to remove and answers it as stored and decoded; or the removal
// found not Done. nil when there is nothing to remove.
func beginRemoval(ctx context.Context, r *repo.Repo, project string, cutoff time.Time, log *slog.Logger) ([]byte, retainedState, error) {
	raw, cur, err := readRetained(ctx, r, project)
	if err != nil {
		return nil, cur, err
	}
	if cur.From > 0 && !cur.Done {
		log.Warn("audit retention: finishing a removal that stopped part way", "project", trailName(project), "from", cur.From, "to", cur.Seq)
		return raw, cur, nil
	}
	last, err := expired(ctx, r, project, cur.Link, cutoff, log)
	if err != nil || last.Seq == cur.Seq {
		return nil, cur, err
	}
	next := retainedState{Link: last, From: cur.Seq + 1, Cutoff: cutoff.UTC()}
	b, err := json.Marshal(next)
	if err != nil {
		return nil, cur, err
	}
	// Compare and set: of two instances at it at once, one removes.
	if err := r.SwapSecret(ctx, retainedKey(project), raw, b); err != nil {
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrNotFound) {
			return nil, cur, nil
		}
		return nil, cur, fmt.Errorf("audit retention of %s: %w", trailName(project), err)
	}
	return b, next, nil
}

// finishRemoval does steps 2 to 4 of Retain for the removal st, which
// the retained key holds as raw.
func finishRemoval(ctx context.Context, r *repo.Repo, rec *Recorder, project string, raw []byte, st retainedState) (*Removal, error) {
	if _, err := r.PurgeTrail(ctx, project, st.Seq); err != nil {
		return nil, fmt.Errorf("audit retention of %s: %w", trailName(project), err)
	}
	// The anchors of the places removed vouch for nothing any more.
	for seq := (st.From + anchorEvery - 1) / anchorEvery * anchorEvery; seq <= st.Seq; seq += anchorEvery {
		if err := r.SetSecret(ctx, anchorKey(project, seq), nil); err != nil {
			return nil, fmt.Errorf("audit retention of %s: %w", trailName(project), err)
		}
	}
	rm := &Removal{Project: project, From: st.From, To: st.Seq, Cutoff: st.Cutoff}
	if err := rec.Record(ctx, rm.event()); err != nil {
		return nil, err
	}
	st.Done = true
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if err := r.SwapSecret(ctx, retainedKey(project), raw, b); err != nil && !errors.Is(err, store.ErrConflict) {
		// A conflict: another instance finished it too.
		return nil, fmt.Errorf("audit retention of %s: %w", trailName(project), err)
	}
	return rm, nil
}

// retentionSpace derives a removal's event id from what it removed, so
// that the event of one removal recorded twice is one id.
var retentionSpace = uuid.MustParse("0f6f3c1e-8a4b-4e55-b0d2-6c1f9a7e3d20")

// event is the removal's record in its project's chain.
func (rm *Removal) event() Event {
	what := ""
	if rm.Project != "" {
		what = "Project/" + rm.Project
	}
	return Event{
		ID:      uuid.NewSHA1(retentionSpace, fmt.Appendf(nil, "%s:%d:%d", rm.Project, rm.From, rm.To)).String(),
		Kind:    RetentionApplied.Name,
		Project: rm.Project,
		Outcome: Success,
		Entities: []Entity{{What: what, Detail: fmt.Sprintf("removed seq %d to %d: the events recorded before %s",
			rm.From, rm.To, rm.Cutoff.UTC().Format(time.RFC3339))}},
	}
}

// expired walks project's chain from the place after start and answers
// the link of the last event to remove: recorded before cutoff, whole and
// in place, at most maxRemoval of them. start when there is none.
func expired(ctx context.Context, r *repo.Repo, project string, start Link, cutoff time.Time, log *slog.Logger) (Link, error) {
	last := start
	tr := r.NewTrailReader()
	for seq := start.Seq + 1; seq <= start.Seq+maxRemoval; seq++ {
		raw, err := tr.Event(ctx, project, seq)
		if errors.Is(err, fhir.ErrNotFound) {
			break // the chain's end
		}
		if errors.Is(err, fhir.ErrGone) {
			log.Error("audit retention stops at a break: kept for audit verify to report", "project", trailName(project), "seq", seq, "problem", Missing)
			break
		}
		if err != nil {
			return Link{}, err
		}
		var ev struct {
			Recorded time.Time `json:"recorded"`
		}
		l, computed, lerr := linkOf(raw)
		if jerr := json.Unmarshal(raw, &ev); lerr != nil || jerr != nil || computed != l.Digest || l.Seq != seq || l.Prev != last.Digest {
			log.Error("audit retention stops at a break: kept for audit verify to report", "project", trailName(project), "seq", seq)
			break
		}
		if !ev.Recorded.Before(cutoff) {
			break
		}
		last = l
	}
	return last, nil
}

// readRetained reads project's retained key: as stored (nil when there is
// none), for a compare and set, and decoded.
func readRetained(ctx context.Context, r *repo.Repo, project string) ([]byte, retainedState, error) {
	raw, err := r.Secret(ctx, retainedKey(project))
	if errors.Is(err, store.ErrNotFound) {
		return nil, retainedState{}, nil
	}
	if err != nil {
		return nil, retainedState{}, err
	}
	var st retainedState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, retainedState{}, fmt.Errorf("audit: %s: %w", retainedKey(project), err)
	}
	return raw, st, nil
}

// trailName names a trail in messages: its project, or _ for the
// server's own.
func trailName(project string) string {
	if project == "" {
		return serverSubject
	}
	return project
}

// Retention removes each project's events older than Keep, a pass every
// Every, from one instance at a time: the instances share a lease in the
// store's secrets (leaseKey), so that a pass is not run by all of them
// at once. The lease only spares the work: each removal is a compare and
// set on its project's retained key, so two instances that both believed
// they held it would still remove each range once.
type Retention struct {
	Repo     *repo.Repo
	Recorder *Recorder
	// Keep is how long events are kept (PINION_AUDIT_RETENTION).
	Keep time.Duration
	// Every is how often a pass runs (an hour when zero).
	Every time.Duration
	Log   *slog.Logger

	holder string
	now    func() time.Time
}

// leaseKey is where the instances keep who runs retention, until when.
const leaseKey = "audit-retention-lease"

// leaseFor is how long a pass holds the lease without renewing it: an
// instance that dies mid-pass is taken over after it.
const leaseFor = 10 * time.Minute

// lease is the value of leaseKey.
type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// Start runs passes until the returned stop, the first at once.
func (rt *Retention) Start() (stop func()) {
	rt.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(rt.Every)
		defer t.Stop()
		for {
			pctx, pcancel := context.WithTimeout(ctx, rt.Every)
			if _, err := rt.Pass(pctx); err != nil && ctx.Err() == nil {
				rt.Log.Error("audit retention pass failed; the next pass tries again", "err", err)
			}
			pcancel()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Pass removes, if this instance takes the lease, every project's events
// older than Keep, and answers what it removed (nil when another instance
// holds the lease).
func (rt *Retention) Pass(ctx context.Context) ([]Removal, error) {
	rt.defaults()
	start := rt.now()
	held, err := rt.take(ctx, nil, start.Add(leaseFor))
	if err != nil || held == nil {
		return nil, err
	}
	cutoff := start.Add(-rt.Keep)
	var removed []Removal
	err = Projects(ctx, rt.Repo, func(project string) error {
		for {
			rm, err := Retain(ctx, rt.Repo, rt.Recorder, project, cutoff, rt.Log)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				// One project's failure holds back no other's; the next
				// pass tries it again.
				rt.Log.Error("audit retention of a project failed", "project", trailName(project), "err", err)
				return nil
			}
			if rm == nil {
				return nil
			}
			removed = append(removed, *rm)
			rt.Log.Info("audit retention removed events", "project", trailName(project), "from", rm.From, "to", rm.To, "cutoff", cutoff)
			// Renewed as it goes: a long pass keeps the lease.
			if held, err = rt.take(ctx, held, rt.now().Add(leaseFor)); err != nil {
				return err
			}
			if held == nil {
				return errors.New("the lease was taken over by another instance")
			}
			if rm.To-rm.From+1 < maxRemoval {
				return nil
			}
		}
	})
	if err != nil {
		return removed, err
	}
	// Kept until the next pass is due: the others leave it to this one.
	_, err = rt.take(ctx, held, start.Add(max(rt.Every, leaseFor)))
	return removed, err
}

func (rt *Retention) defaults() {
	if rt.Every <= 0 {
		rt.Every = time.Hour
	}
	if rt.holder == "" {
		rt.holder = uuid.NewString()
	}
	if rt.now == nil {
		rt.now = time.Now
	}
	if rt.Log == nil {
		rt.Log = slog.Default()
	}
}

// take takes (held nil) or renews (held: the value this instance last
// wrote) the lease until until: nil, nil when another instance holds it.
func (rt *Retention) take(ctx context.Context, held []byte, until time.Time) ([]byte, error) {
	mine, err := json.Marshal(lease{Holder: rt.holder, Until: until.UTC()})
	if err != nil {
		return nil, err
	}
	old := held
	if old == nil {
		raw, err := rt.Repo.Secret(ctx, leaseKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			var l lease
			if json.Unmarshal(raw, &l) == nil && l.Holder != rt.holder && rt.now().Before(l.Until) {
				return nil, nil
			}
			old = raw
		}
	}
	err = rt.Repo.SwapSecret(ctx, leaseKey, old, mine)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return mine, nil
}
