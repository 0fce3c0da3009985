package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
)

// A hash chain shows an event edited, removed or moved while events
// after it remain; it cannot show events deleted from its end, nor a
// stretch rewritten with every digest recomputed. Signed checkpoints do:
// each says, under the trail's Ed25519 key, that place seq of a
// project's chain had digest d at time t. They live in the store's
// secrets, out of the chain (they change no event), in two kinds:
//   - the latest, audit-checkpoint:<project>: the chain's head, signed
//     every anchorEvery events or checkpointAge, whichever comes first
//     (a chain that ends before it was truncated);
//   - anchors, audit-checkpoint:<project>:<seq>, at every place that is
//     a multiple of anchorEvery, which Verify reads as it walks by.
// Since each digest covers everything before it, a checkpoint checks the
// whole chain up to its place.

// Checkpoint is a signed statement of one place of a project's chain.
type Checkpoint struct {
	Project string    `json:"project"`
	Seq     int64     `json:"seq"`
	Digest  string    `json:"digest"`
	Time    time.Time `json:"time"`
	Sig     string    `json:"sig"` // base64, Ed25519, of message()
}

// message is what a checkpoint's signature covers.
func (c *Checkpoint) message() []byte {
	return fmt.Appendf(nil, "pinion audit checkpoint\n%s\n%d\n%s\n%s", c.Project, c.Seq, c.Digest, c.Time.UTC().Format(time.RFC3339Nano))
}

// valid says whether the checkpoint is signed by key.
func (c *Checkpoint) valid(key ed25519.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(c.Sig)
	return err == nil && len(key) == ed25519.PublicKeySize && ed25519.Verify(key, c.message(), sig)
}

// How often checkpoints are made: an anchor at every multiple of
// anchorEvery, and the latest moved to the head at least that often, or
// once checkpointAge has passed since it last moved. anchorEvery is fixed
// for good (Verify finds anchors by it); a var for the tests.
var (
	anchorEvery   int64 = 1000
	checkpointAge       = 10 * time.Minute
)

// maxAnchors bounds the anchors one write makes: a chain checkpointed
// for the first time gets its earlier ones over several writes.
const maxAnchors = 16

// signingKeyName is where the trail keeps its private key (the Ed25519
// seed), made on first use.
const signingKeyName = "audit-signing-key"

// The keys are the trail's in blocks ("audit-trail-"): a data directory
// whose events were stored as resources (before blocks) keeps them, and
// its old checkpoints, which name places of that chain, vouch for none of
// the new one.
func latestKey(project string) string { return "audit-trail-checkpoint:" + project }

func anchorKey(project string, seq int64) string {
	return "audit-trail-checkpoint:" + project + ":" + strconv.FormatInt(seq, 10)
}

// signingKey reads the trail's key, making it if there is none yet.
func signingKey(ctx context.Context, r *repo.Repo) (ed25519.PrivateKey, error) {
	seed, err := r.Secret(ctx, signingKeyName)
	if errors.Is(err, store.ErrNotFound) {
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		err = r.SwapSecret(ctx, signingKeyName, nil, seed)
		if errors.Is(err, store.ErrExists) { // another writer made it first
			seed, err = r.Secret(ctx, signingKeyName)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("audit signing key: %d bytes, not an Ed25519 seed", len(seed))
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// PublicKey is the key the trail's checkpoints are signed with, nil when
// none was made yet. It never makes one: verifying changes nothing.
func PublicKey(ctx context.Context, r *repo.Repo) (ed25519.PublicKey, error) {
	seed, err := r.Secret(ctx, signingKeyName)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("audit signing key: %d bytes, not an Ed25519 seed", len(seed))
	}
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), nil
}

// KeyText writes a public key as the verify command and endpoint show it.
func KeyText(key ed25519.PublicKey) string {
	if key == nil {
		return ""
	}
	return "ed25519:" + base64.StdEncoding.EncodeToString(key)
}

func sign(key ed25519.PrivateKey, project string, l Link, at time.Time) Checkpoint {
	c := Checkpoint{Project: project, Seq: l.Seq, Digest: l.Digest, Time: at.UTC()}
	c.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, c.message()))
	return c
}

// readCheckpoint reads the checkpoint under key: nil when there is none.
// raw is as stored, for a compare and set.
func readCheckpoint(ctx context.Context, r *repo.Repo, key string) (*Checkpoint, []byte, error) {
	raw, err := r.Secret(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var c Checkpoint
	if err := json.Unmarshal(raw, &c); err != nil {
		// Unreadable: kept as a checkpoint no key signs, which Verify
		// reports.
		return &Checkpoint{}, raw, nil
	}
	return &c, raw, nil
}

// moveLatest makes c project's latest checkpoint unless one at a later
// place already is.
func moveLatest(ctx context.Context, r *repo.Repo, project string, c Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	for range 4 {
		cur, raw, err := readCheckpoint(ctx, r, latestKey(project))
		if err != nil {
			return err
		}
		if cur != nil && cur.Seq >= c.Seq {
			return nil
		}
		err = r.SwapSecret(ctx, latestKey(project), raw, b)
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil // others keep moving it: it is at least as far on
}

// SignHead makes project's latest checkpoint of its chain's head now,
// as the writers do every anchorEvery events or checkpointAge (an
// operator's command; the tests).
func SignHead(ctx context.Context, r *repo.Repo, project string) (*Checkpoint, error) {
	key, err := signingKey(ctx, r)
	if err != nil {
		return nil, err
	}
	w := &Writer{repo: r, heads: map[string]Link{}}
	head, _, err := w.head(ctx, project)
	if err != nil {
		return nil, err
	}
	if head.Seq == 0 {
		return nil, nil
	}
	c := sign(key, project, head, time.Now())
	return &c, moveLatest(ctx, r, project, c)
}

// checkpointer makes a writer's checkpoints: after each write (after),
// and every minute for the chains whose head the latest checkpoint has
// not reached for checkpointAge (run).
type checkpointer struct {
	repo *repo.Repo
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	key    ed25519.PrivateKey
	chains map[string]*chainMarks
	// written are the links of the block just written, while after runs:
	// an anchor among them is not read back from the store.
	written []Link
}

// known is the link at seq among those just written.
func (c *checkpointer) known(seq int64) (Link, bool) {
	if len(c.written) == 0 {
		return Link{}, false
	}
	i := seq - c.written[0].Seq
	if i < 0 || i >= int64(len(c.written)) {
		return Link{}, false
	}
	return c.written[i], true
}

// chainMarks is what a writer knows of a project's checkpoints.
type chainMarks struct {
	loaded   bool
	latest   int64     // the latest checkpoint's place
	at       time.Time // and when it was made
	anchored int64     // the last anchor made (or assumed made)
	head     Link      // the head this writer last wrote
}

func newCheckpointer(r *repo.Repo, log *slog.Logger) *checkpointer {
	return &checkpointer{repo: r, log: log, now: time.Now, chains: map[string]*chainMarks{}}
}

// after makes the checkpoints that head, just written, calls for. A
// checkpoint that fails is logged: the events are stored, and a later
// write or tick makes the next one.
func (c *checkpointer) after(ctx context.Context, project string, head Link, written []Link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written = written
	defer func() { c.written = nil }()
	if err := c.mark(ctx, project, head, false); err != nil {
		c.log.Warn("audit checkpoint not made; a later one will be", "project", trailName(project), "seq", head.Seq, "err", err)
	}
}

// run moves the latest checkpoint of quiet chains to their heads, until
// ctx ends.
func (c *checkpointer) run(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.tick(ctx)
	}
}

// tick moves the latest checkpoint of each chain this writer wrote whose
// head it has not reached for checkpointAge.
func (c *checkpointer) tick(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for project, m := range c.chains {
		if m.head.Seq > m.latest && c.now().Sub(m.at) >= checkpointAge {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := c.mark(tctx, project, m.head, true); err != nil {
				c.log.Warn("audit checkpoint not made; a later one will be", "project", trailName(project), "seq", m.head.Seq, "err", err)
			}
			cancel()
		}
	}
}

// mark makes the anchors up to head and moves the latest checkpoint to it
// when due (or when quiet: the tick found it due).
func (c *checkpointer) mark(ctx context.Context, project string, head Link, quiet bool) error {
	m := c.chains[project]
	if m == nil {
		m = &chainMarks{}
		c.chains[project] = m
	}
	m.head = head
	if !m.loaded {
		cur, _, err := readCheckpoint(ctx, c.repo, latestKey(project))
		if err != nil {
			return err
		}
		if cur != nil {
			m.latest, m.at = cur.Seq, cur.Time
			m.anchored = cur.Seq / anchorEvery * anchorEvery
		}
		m.loaded = true
	}
	due := quiet || head.Seq-m.latest >= anchorEvery || c.now().Sub(m.at) >= checkpointAge
	if m.anchored+anchorEvery > head.Seq && !due {
		return nil
	}
	if c.key == nil {
		key, err := signingKey(ctx, c.repo)
		if err != nil {
			return err
		}
		c.key = key
	}
	for n := 0; m.anchored+anchorEvery <= head.Seq && n < maxAnchors; n++ {
		seq := m.anchored + anchorEvery
		l := head
		if at, ok := c.known(seq); ok {
			l = at
		} else if seq != head.Seq {
			res, err := c.repo.Read(ctx, repo.AllProjects, "AuditEvent", ID(project, seq))
			if err != nil && !fhir.Missing(err) && !errors.Is(err, fhir.ErrGone) {
				return err
			}
			var at Link
			if err == nil {
				at, _, err = linkOf(res.JSON)
			}
			if err != nil {
				m.anchored = seq // nothing there to vouch for: Verify reports the place
				continue
			}
			l = at
		}
		b, err := json.Marshal(sign(c.key, project, l, c.now()))
		if err != nil {
			return err
		}
		if err := c.repo.SetSecret(ctx, anchorKey(project, seq), b); err != nil {
			return err
		}
		m.anchored = seq
	}
	if !due {
		return nil
	}
	now := c.now()
	if err := moveLatest(ctx, c.repo, project, sign(c.key, project, head, now)); err != nil {
		return err
	}
	m.latest, m.at = head.Seq, now
	return nil
}
