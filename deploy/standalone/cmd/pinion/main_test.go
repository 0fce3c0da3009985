package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	_ "modernc.org/sqlite"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/dirlock"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// buildPinion builds this command into a temporary directory.
func buildPinion(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pinion")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// dataDir is a standalone data directory whose store holds chained
// events, as a running Pinion's writers store them.
type dataDir struct {
	t    *testing.T
	dir  string
	env  []string // settings beside PINION_DATA_DIR
	st   store.Store
	repo *repo.Repo
}

func newDataDir(t *testing.T) *dataDir {
	d := &dataDir{t: t, dir: t.TempDir()}
	d.open()
	t.Cleanup(d.close)
	return d
}

func (d *dataDir) open() {
	d.t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(d.dir, "pinion.db"), sqlstore.Options{Sync: "normal", Log: quiet})
	if err != nil {
		d.t.Fatal(err)
	}
	r, err := repo.New(st, nil, repo.Options{Log: quiet})
	if err != nil {
		d.t.Fatal(err)
	}
	d.st, d.repo = st, r
}

func (d *dataDir) close() {
	if d.repo != nil {
		d.repo.Close()
		_ = d.st.Close()
		d.repo, d.st = nil, nil
	}
}

// project makes a Project and stores n of its events.
func (d *dataDir) project(n int) string {
	d.t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	if _, err := d.repo.Create(ctx, repo.AllProjects, map[string]any{"resourceType": "Project", "name": "p " + id}, repo.WriteOptions{ID: id}); err != nil {
		d.t.Fatal(err)
	}
	d.events(id, n)
	return id
}

func (d *dataDir) events(project string, n int) {
	d.t.Helper()
	evs := make([]audit.Event, n)
	for i := range evs {
		evs[i] = audit.Event{ID: uuid.NewString(), Kind: audit.SignIn.Name, Project: project, Outcome: audit.Success,
			Time: time.Date(2026, 12, 7, 10, 0, i, 0, time.UTC), Who: fmt.Sprintf("User/u%d", i), Address: "10.0.0.1"}
	}
	if err := audit.NewWriter(d.repo, nil, quiet).Write(context.Background(), project, evs); err != nil {
		d.t.Fatal(err)
	}
}

// block is the events of project's first block of the trail, read from
// the store's file.
func (d *dataDir) block(project string) [][]byte {
	d.t.Helper()
	d.close()
	db, err := sql.Open("sqlite", filepath.Join(d.dir, "pinion.db"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer db.Close()
	var data []byte
	if err := db.QueryRow(`SELECT events FROM trail WHERE project = ? AND first = 1`, project).Scan(&data); err != nil {
		d.t.Fatal(err)
	}
	events, err := store.DecodeTrail(data)
	if err != nil {
		d.t.Fatal(err)
	}
	return events
}

// underneath runs SQL on the store's file with Pinion stopped.
func (d *dataDir) underneath(query string, args ...any) {
	d.t.Helper()
	d.close()
	db, err := sql.Open("sqlite", filepath.Join(d.dir, "pinion.db"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(query, args...)
	if err != nil {
		d.t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		d.t.Fatalf("%s changed nothing", query)
	}
}

// verify runs `pinion audit verify args...` on the data directory.
func (d *dataDir) verify(bin string, args ...string) (code int, stdout string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"audit", "verify"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PINION_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "PINION_DATA_DIR="+d.dir, "PINION_LOG_LEVEL=warn"), d.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		d.t.Fatalf("run: %v", err)
	}
	if errOut.Len() > 0 {
		d.t.Logf("stderr of audit verify %v: %s", args, errOut.String())
	}
	return code, out.String()
}

// `pinion audit verify` reads the store of PINION_DATA_DIR, beside a
// Pinion that has it open or with none: the trail's public key, then a
// line per chain, exit 0 when each is whole; an event edited or deleted
// underneath the API, or the chain's end cut off, is named by place, id
// and problem, and the exit is 1; a wrong argument is 2.
func TestAuditVerifyCommand(t *testing.T) {
	bin := buildPinion(t)
	d := newDataDir(t)
	p1, p2, p3 := d.project(12), d.project(3), d.project(4)
	d.events("", 2)
	d.project(0) // a project without a trail: not listed by --all
	pub, err := audit.PublicKey(context.Background(), d.repo)
	if err != nil || pub == nil {
		t.Fatalf("the writers signed no checkpoint: %v", err)
	}
	key := "key " + audit.KeyText(pub) + "\n"

	// Beside the store held open for writing, as a running Pinion holds it.
	code, out := d.verify(bin, p1)
	if want := key + p1 + " whole events=12 from=1 head=12\n"; code != 0 || out != want {
		t.Fatalf("exit %d, %q; want 0, %q", code, out, want)
	}
	code, out = d.verify(bin, "--all")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := map[string]bool{p1 + " whole events=12 from=1 head=12": true, p2 + " whole events=3 from=1 head=3": true,
		p3 + " whole events=4 from=1 head=4": true}
	if code != 0 || len(lines) != 5 || lines[0]+"\n" != key || lines[1] != "_ whole events=2 from=1 head=2" ||
		!want[lines[2]] || !want[lines[3]] || !want[lines[4]] {
		t.Fatalf("--all: exit %d\n%s", code, out)
	}

	// Edited, then deleted, underneath the API, with Pinion stopped.
	// Each write's events are one block of the trail (store.TrailBlock):
	// the seventh of p1's, in its one block, is edited.
	events := d.block(p1)
	events[6] = bytes.Replace(events[6], []byte(`"outcome":"0"`), []byte(`"outcome":"4"`), 1)
	d.underneath(`UPDATE trail SET events = ? WHERE project = ? AND first = 1`, store.EncodeTrail(events), p1)
	code, out = d.verify(bin, p1)
	if want := key + fmt.Sprintf("%s broken seq=7 id=%s problem=%q events=6 from=1\n", p1, audit.ID(p1, 7), audit.Edited); code != 1 || out != want {
		t.Fatalf("after an edit: exit %d, %q; want 1, %q", code, out, want)
	}
	// The last events deleted: only the signed checkpoint shows it.
	d.underneath(`UPDATE trail SET events = ?, last = 2 WHERE project = ? AND first = 1`, store.EncodeTrail(d.block(p3)[:2]), p3)
	code, out = d.verify(bin, p3)
	if want := key + fmt.Sprintf("%s broken seq=3 id=%s problem=%q events=2 from=1\n", p3, audit.ID(p3, 3), audit.Truncated); code != 1 || out != want {
		t.Fatalf("after a truncation: exit %d, %q; want 1, %q", code, out, want)
	}
	// The second of three deleted, the third kept at its place: the block
	// is cut in two around it.
	events = d.block(p2)
	d.underneath(`INSERT INTO trail(project, first, last, ts_from, ts_to, events) VALUES(?, 3, 3, 0, 0, ?)`, p2, store.EncodeTrail(events[2:]))
	d.underneath(`UPDATE trail SET events = ?, last = 1 WHERE project = ? AND first = 1`, store.EncodeTrail(events[:1]), p2)
	code, out = d.verify(bin, "--all")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("%s broken seq=2 id=%s problem=%q", p2, audit.ID(p2, 2), audit.Missing)) ||
		!strings.Contains(out, p1+" broken seq=7") || !strings.Contains(out, "_ whole events=2") {
		t.Fatalf("--all after a deletion: exit %d\n%s", code, out)
	}

	for _, args := range [][]string{{"not-a-project"}, {}, {p1, p2}} {
		if code, _ := d.verify(bin, args...); code != 2 {
			t.Errorf("audit verify %v: exit %d, want 2", args, code)
		}
	}
	d.dir = t.TempDir() // no store there
	if code, _ := d.verify(bin, p1); code != 2 {
		t.Errorf("no store: exit %d, want 2", code)
	}
}

// With PINION_STORE=ferretdb the command reads through the FerretDB a
// running Pinion serves (it holds the data directory), or, with Pinion
// stopped, starts one on the directory itself.
func TestAuditVerifyCommandFerretDB(t *testing.T) {
	bin := buildPinion(t)
	ctx := context.Background()
	d := &dataDir{t: t, dir: t.TempDir(), env: []string{"PINION_STORE=ferretdb"}}
	f, err := embedded.StartFerretDB(embedded.FerretOptions{Dir: filepath.Join(d.dir, "db"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(f.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	if d.st, err = mongostore.Open(ctx, client.Database("pinion"), mongostore.Options{}); err != nil {
		t.Fatal(err)
	}
	if d.repo, err = repo.New(d.st, nil, repo.Options{Log: quiet}); err != nil {
		t.Fatal(err)
	}
	defer d.repo.Close()
	p := d.project(6)

	// Running: Pinion holds the directory and serves its FerretDB.
	lock, err := dirlock.Acquire(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	code, out := d.verify(bin, p)
	if !strings.HasSuffix(out, p+" whole events=6 from=1 head=6\n") || code != 0 {
		t.Fatalf("beside a running Pinion: exit %d, %q", code, out)
	}
	// The last event deleted underneath, then Pinion stopped.
	trail := client.Database("pinion").Collection("audit_trail")
	var block struct {
		Events []byte `bson:"events"`
	}
	if err := trail.FindOne(ctx, bson.D{{Key: "project", Value: p}}).Decode(&block); err != nil {
		t.Fatal(err)
	}
	events, err := store.DecodeTrail(block.Events)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trail.UpdateOne(ctx, bson.D{{Key: "project", Value: p}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "events", Value: store.EncodeTrail(events[:5])}, {Key: "last", Value: 5}}}}); err != nil {
		t.Fatal(err)
	}
	_ = lock.Release()
	_ = client.Disconnect(ctx)
	f.Close()
	code, out = d.verify(bin, p)
	if want := fmt.Sprintf("%s broken seq=6 id=%s problem=%q events=5 from=1\n", p, audit.ID(p, 6), audit.Truncated); code != 1 || !strings.HasSuffix(out, want) {
		t.Fatalf("with Pinion stopped: exit %d, %q; want 1, %q", code, out, want)
	}
}
