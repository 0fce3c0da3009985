package auditsink

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	_ "modernc.org/sqlite"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/metrics"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
	"github.com/pinion-health/pinion/pkg/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// trail is a stream, a store, and the writer that stores what is
// recorded: the audit trail as the fhir service runs it.
type trail struct {
	js   jetstream.JetStream
	repo *repo.Repo
	rec  *audit.Recorder
	path string // the SQLite file
}

func newTrail(t *testing.T) *trail {
	t.Helper()
	ctx := context.Background()
	js := testenv.JetStream(t)
	if err := audit.EnsureStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pinion.db")
	st, err := sqlstore.Open(ctx, path, sqlstore.Options{Sync: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	stop, err := audit.NewWriter(r, js, quiet).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return &trail{js: js, repo: r, rec: audit.NewRecorder(js), path: path}
}

// cutOut empties place seq of project's trail underneath the API, as
// someone with the database file could: its block is cut in two around
// it, the events after it keeping their places.
func (tr *trail) cutOut(t *testing.T, project string, seq int64) {
	t.Helper()
	db, err := sql.Open("sqlite", tr.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var first int64
	var data []byte
	if err := db.QueryRow(`SELECT first, events FROM trail WHERE project = ? AND first <= ? ORDER BY first DESC LIMIT 1`, project, seq).Scan(&first, &data); err != nil {
		t.Fatal(err)
	}
	evs, err := store.DecodeTrail(data)
	if err != nil {
		t.Fatal(err)
	}
	put := func(at int64, part [][]byte) {
		if len(part) == 0 {
			return
		}
		if _, err := db.Exec(`INSERT INTO trail(project, first, last, ts_from, ts_to, events) VALUES(?, ?, ?, 0, 0, ?)`,
			project, at, at+int64(len(part))-1, store.EncodeTrail(part)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`DELETE FROM trail WHERE project = ? AND first = ?`, project, first); err != nil {
		t.Fatal(err)
	}
	put(first, evs[:seq-first])
	put(seq+1, evs[seq-first+1:])
}

// sink runs a sink of dest, fast to retry, until the test ends or stop.
func (tr *trail) sink(t *testing.T, dest Destination) (stop func()) {
	t.Helper()
	stop, err := New(dest, tr.repo, tr.js, quiet, Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Sample: 20 * time.Millisecond}).Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return stop
}

// stored is a project's chain as stored: each place's event, in order.
func (tr *trail) stored(t *testing.T, project string) []storedEvent {
	t.Helper()
	var out []storedEvent
	for seq := int64(1); ; seq++ {
		raw, l, err := audit.Stored(context.Background(), tr.repo.NewTrailReader(), project, seq)
		if fhir.Missing(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, storedEvent{id: audit.ID(project, seq), json: raw, link: l})
	}
}

type storedEvent struct {
	id   string
	json []byte
	link audit.Link
}

// load records n events per goroutine, over projects, outcomes
// alternating, and says how long the slowest Record took.
func (tr *trail) load(t *testing.T, goroutines, n int, projects []string, tag string) (slowest time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				outcome := audit.Success
				if i%4 == 3 {
					outcome = audit.MinorFailure
				}
				e := audit.Event{ID: fmt.Sprintf("%s-%d-%d", tag, g, i), Kind: audit.SignIn.Name, Project: projects[(g+i)%len(projects)],
					Outcome: outcome, Who: "User/u" + strconv.Itoa(g), Address: "10.0.0.1"}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := tr.rec.Record(ctx, e)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				slowest = max(slowest, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return slowest
}

// delivered says whether the projects' chains hold the total of events
// recorded, and r has every one.
func (tr *trail) delivered(t *testing.T, r *receiver, projects []string, total int) bool {
	got, _ := r.arrivals()
	have := map[string]bool{}
	for _, a := range got {
		have[a.id] = true
	}
	n := 0
	for _, p := range projects {
		for _, e := range tr.stored(t, p) {
			if !have[e.id] {
				return false
			}
			n++
		}
	}
	return n == total
}

// check holds what r received to the stored chains: each event byte for
// byte as stored; per project in chain order, where an event seen before
// may come again only as part of a run sent again (at least once: a
// delivery whose outcome was not known, a syslog connection's last
// messages); none missing. It returns how many came again.
func (tr *trail) check(t *testing.T, name string, r *receiver, projects []string) (again int) {
	t.Helper()
	got, errs := r.arrivals()
	for _, e := range errs {
		t.Errorf("%s receiver: %s", name, e)
	}
	type place struct {
		project string
		seq     int64
		json    []byte
		digest  string
	}
	places := map[string]place{}
	for _, p := range projects {
		for _, e := range tr.stored(t, p) {
			places[e.id] = place{p, e.link.Seq, e.json, e.link.Digest}
		}
	}
	last := map[string]int64{} // per project, the furthest place received
	prev := map[string]int64{} // per project, the place received last
	for i, a := range got {
		pl, ok := places[a.id]
		if !ok {
			t.Fatalf("%s: arrival %d is no stored event: %s", name, i, a.json)
		}
		if string(a.json) != string(pl.json) {
			t.Fatalf("%s: %s seq %d arrived as\n%s\nstored as\n%s", name, pl.project, pl.seq, a.json, pl.json)
		}
		if a.app != "" || name == "syslog" { // the syslog header and structured data
			if a.project != pl.project || a.seq != strconv.FormatInt(pl.seq, 10) || a.dg != pl.digest || a.app != "pinion" || a.msgID != "sign-in" {
				t.Fatalf("%s: %s seq %d: structured data %+v", name, pl.project, pl.seq, a)
			}
			want := uint8(84) // authpriv.warning: refused
			if strings.Contains(string(a.json), `"outcome":"0"`) {
				want = 85 // authpriv.notice
			}
			if a.pri != want {
				t.Fatalf("%s: %s seq %d: PRI %d, want %d", name, pl.project, pl.seq, a.pri, want)
			}
		}
		switch {
		case pl.seq == last[pl.project]+1:
			last[pl.project] = pl.seq
		case pl.seq > last[pl.project]+1:
			t.Fatalf("%s: %s seq %d arrived after %d: %d to %d missing", name, pl.project, pl.seq, last[pl.project], last[pl.project]+1, pl.seq-1)
		default:
			// Sent again: a run that starts anywhere before, and goes on
			// in order.
			if pl.seq != prev[pl.project]+1 && pl.seq >= prev[pl.project] && prev[pl.project] != last[pl.project] {
				t.Fatalf("%s: %s seq %d, sent again, after %d", name, pl.project, pl.seq, prev[pl.project])
			}
			again++
		}
		prev[pl.project] = pl.seq
	}
	for _, p := range projects {
		if n := int64(len(tr.stored(t, p))); last[p] != n {
			t.Fatalf("%s: project %q delivered to %d of %d", name, p, last[p], n)
		}
	}
	return again
}

// The trail streams out to a syslog receiver and a webhook while several
// callers record under load; each receiver goes down in the middle
// (syslog: closed, twice; the webhook: 503, then closed) and comes back.
// Recording never waits on them, the queues show the backlog, and in the
// end each receiver has every stored event, exactly as stored, in chain
// order per project.
func TestSinksDeliverEverythingThroughOutages(t *testing.T) {
	tr := newTrail(t)
	ca := newTestCA(t)
	syslogR := newSyslogReceiver(t, ca)
	const secret = "a webhook secret of at least 32 characters"
	hookR := newWebhookReceiver(t, ca, secret)
	syslogD, err := NewSyslog(SyslogConfig{Addr: syslogR.addr, TLS: ca.client(), Hostname: "pinion-test"})
	if err != nil {
		t.Fatal(err)
	}
	hookD, err := NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
	if err != nil {
		t.Fatal(err)
	}
	failures := func(name string) float64 { return testutil.ToFloat64(metrics.AuditSinkFailures.WithLabelValues(name)) }
	queue := func(name string) float64 { return testutil.ToFloat64(metrics.AuditSinkQueue.WithLabelValues(name)) }
	syslogFailed, hookFailed := failures("syslog"), failures("webhook")
	tr.sink(t, syslogD)
	tr.sink(t, hookD)
	projects := []string{"p1", "p2", ""}
	const limit = 60 * time.Second

	// Under load, both down in the middle.
	loaded := make(chan time.Duration)
	go func() { loaded <- tr.load(t, 6, 40, projects, "a") }()
	testenv.EventuallyWithin(t, limit, "the first deliveries", func() bool { return syslogR.count() >= 30 && hookR.count() >= 30 })
	syslogR.down()
	hookR.setRefuse(true)
	<-loaded
	// Recording does not wait on a sink: more while both are down.
	if slowest := tr.load(t, 6, 20, projects, "b"); slowest > 5*time.Second {
		t.Fatalf("a Record took %s while the receivers were down", slowest)
	}
	testenv.EventuallyWithin(t, limit, "the writer to store every event", func() bool {
		n := 0
		for _, p := range projects {
			n += len(tr.stored(t, p))
		}
		return n == 6*60
	})
	testenv.EventuallyWithin(t, limit, "failed attempts and a queue", func() bool {
		return failures("syslog") > syslogFailed && failures("webhook") > hookFailed && hookR.refusals() > 0 &&
			queue("syslog") >= 1 && queue("webhook") >= 1
	})

	// Back, under load: the syslog receiver goes down again in the middle,
	// and the webhook, refusing until now, goes down altogether.
	syslogR.up()
	hookR.down()
	hookR.setRefuse(false)
	go func() { loaded <- tr.load(t, 6, 40, projects, "c") }()
	before := syslogR.count()
	testenv.EventuallyWithin(t, limit, "syslog deliveries after the outage", func() bool { return syslogR.count() >= before+100 })
	syslogR.down()
	hookFailed = failures("webhook")
	testenv.EventuallyWithin(t, limit, "the webhook's attempts to fail", func() bool { return failures("webhook") > hookFailed })
	syslogR.up()
	hookR.up()
	<-loaded

	testenv.EventuallyWithin(t, limit, "every event at the syslog receiver", func() bool { return tr.delivered(t, &syslogR.receiver, projects, 6*100) })
	testenv.EventuallyWithin(t, limit, "every event at the webhook", func() bool { return tr.delivered(t, &hookR.receiver, projects, 6*100) })
	testenv.EventuallyWithin(t, limit, "the queues to empty", func() bool { return queue("syslog") == 0 && queue("webhook") == 0 })
	for _, p := range projects {
		if rep, err := audit.Verify(context.Background(), tr.repo, p); err != nil || !rep.Whole {
			t.Fatalf("project %q: %+v %v", p, rep, err)
		}
	}
	t.Logf("syslog: %d arrivals, %d sent again; webhook: %d arrivals, %d sent again",
		syslogR.count(), tr.check(t, "syslog", &syslogR.receiver, projects), hookR.count(), tr.check(t, "webhook", &hookR.receiver, projects))
}

// An AuditEvent as a syslog message, to the byte: PRI authpriv.notice
// (refused: warning), version 1, the recorded time, hostname, pinion, the
// event's code, the structured data, and the JSON as stored.
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome string
		pri     string
	}{
		{"success", "0", "<85>"},
		{"refused", "4", "<84>"},
		{"failed", "8", "<83>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"id":"x","outcome":"` + tc.outcome + `","recorded":"2026-12-07T10:00:01.250Z","resourceType":"AuditEvent",` +
				`"subtype":[{"code":"110122","system":"http://dicom.nema.org/resources/ontology/DCM"},{"code":"sign-in","system":"https://pinion.health/fhir/CodeSystem/audit-event"}],` +
				`"text":"quote \" and ] and \\ kept"}`
			e := Event{Project: "p-1", Seq: 42, Link: audit.Link{Seq: 42, Digest: "ab12"}, JSON: []byte(raw)}
			got, err := Format(e, "host-1")
			if err != nil {
				t.Fatal(err)
			}
			want := tc.pri + `1 2026-12-07T10:00:01.25Z host-1 pinion - sign-in [pinion@32473 digest="ab12" project="p-1" seq="42"] ` + raw
			if string(got) != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if f := Frame(got); string(f) != strconv.Itoa(len(got))+" "+string(got) {
				t.Fatalf("frame %q", f)
			}
		})
	}
	// The server's own trail: an empty project.
	got, err := Format(Event{Seq: 1, Link: audit.Link{Digest: "d"}, JSON: []byte(`{"recorded":"2026-12-07T10:00:00.000Z","outcome":"0"}`)}, "h")
	if err != nil || !strings.Contains(string(got), `[pinion@32473 digest="d" project="" seq="1"]`) {
		t.Fatalf("%s %v", got, err)
	}
}

// The settings make the sinks they name, reading the CA files; a file
// that is not there is refused, naming its setting.
func TestFromConfig(t *testing.T) {
	ca := newTestCA(t)
	caFile := ca.file(t)
	for _, tc := range []struct {
		name  string
		cfg   config.Config
		sinks []string
		err   string
	}{
		{"none", config.Config{}, nil, ""},
		{"both", config.Config{AuditSyslogAddr: "127.0.0.1:6514", AuditSyslogCA: caFile,
			AuditWebhookURL: "https://127.0.0.1/in", AuditWebhookSecret: strings.Repeat("s", 32), AuditWebhookCA: caFile},
			[]string{"syslog", "webhook"}, ""},
		{"system CAs", config.Config{AuditWebhookURL: "https://siem.example.com/in", AuditWebhookSecret: strings.Repeat("s", 32)},
			[]string{"webhook"}, ""},
		{"no CA file", config.Config{AuditSyslogAddr: "127.0.0.1:6514", AuditSyslogCA: "/nonexistent/ca.pem"}, nil,
			"PINION_AUDIT_SYSLOG_CA: open /nonexistent/ca.pem: no such file or directory"},
		{"not a CA file", config.Config{AuditWebhookURL: "https://siem.example.com/in", AuditWebhookSecret: strings.Repeat("s", 32), AuditWebhookCA: "/dev/null"}, nil,
			"PINION_AUDIT_WEBHOOK_CA: /dev/null holds no PEM certificate"},
		{"no client key", config.Config{AuditSyslogAddr: "127.0.0.1:6514", AuditSyslogCert: caFile, AuditSyslogKey: "/nonexistent/key.pem"}, nil,
			"PINION_AUDIT_SYSLOG_CERT and PINION_AUDIT_SYSLOG_KEY: open /nonexistent/key.pem: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dests, err := FromConfig(&tc.cfg)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range dests {
				names = append(names, d.Name())
			}
			if strings.Join(names, ",") != strings.Join(tc.sinks, ",") {
				t.Fatalf("sinks %v, want %v", names, tc.sinks)
			}
		})
	}
}

// Two instances of one sink (two fhir processes) share its consumer: one
// delivers at a time, so each project's order holds, and when one stops
// the other goes on where it was.
func TestSinkInstancesShareTheWork(t *testing.T) {
	tr := newTrail(t)
	ca := newTestCA(t)
	const secret = "a webhook secret of at least 32 characters"
	hookR := newWebhookReceiver(t, ca, secret)
	var stops []func()
	for range 2 {
		d, err := NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, tr.sink(t, d))
	}
	projects := []string{"p1", "p2", ""}
	loaded := make(chan time.Duration)
	go func() { loaded <- tr.load(t, 4, 50, projects, "a") }()
	testenv.EventuallyWithin(t, 30*time.Second, "the first deliveries", func() bool { return hookR.count() >= 50 })
	stops[0]()
	<-loaded
	testenv.EventuallyWithin(t, 30*time.Second, "every event at the webhook", func() bool { return tr.delivered(t, &hookR.receiver, projects, 4*50) })
	t.Logf("%d arrivals, %d sent again", hookR.count(), tr.check(t, "webhook", &hookR.receiver, projects))
}

// A message delivered to a sink again, its events delivered long before
// (its acknowledgement lost; a process stopped before it), is
// acknowledged at once, by a sink that remembers nothing of it: its
// events are found before the cursor, and not sent again.
func TestRepeatedMessageAcknowledged(t *testing.T) {
	tr := newTrail(t)
	ca := newTestCA(t)
	const secret = "a webhook secret of at least 32 characters"
	hookR := newWebhookReceiver(t, ca, secret)
	d, err := NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
	if err != nil {
		t.Fatal(err)
	}
	stop := tr.sink(t, d)
	projects := []string{"p1"}
	tr.load(t, 2, 30, projects, "a")
	testenv.EventuallyWithin(t, 30*time.Second, "every event at the webhook", func() bool { return tr.delivered(t, &hookR.receiver, projects, 2*30) })
	stop()

	ctx := context.Background()
	s, err := tr.js.Stream(ctx, audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := tr.js.Publish(ctx, first.Subject, first.Data, jetstream.WithMsgID("again"))
	if err != nil {
		t.Fatal(err)
	}
	d, err = NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
	if err != nil {
		t.Fatal(err)
	}
	tr.sink(t, d) // gives up on missing events after 2 minutes: well after this test's wait
	before := hookR.count()
	// Well within ackWait: a message the stopped sink had taken went back.
	testenv.EventuallyWithin(t, 10*time.Second, "the repeated message acknowledged", func() bool {
		c, err := tr.js.Consumer(ctx, audit.Stream, ConsumerPrefix+"webhook")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream >= ack.Sequence
	})
	if hookR.count() != before {
		t.Fatalf("%d events sent again", hookR.count()-before)
	}
	tr.check(t, "webhook", &hookR.receiver, projects)
}

// An event deleted underneath the API (its place stays, gone) is passed
// over: the events after it go out, in order, without waiting for it.
func TestDeletedEventPassedOver(t *testing.T) {
	tr := newTrail(t)
	ca := newTestCA(t)
	const secret = "a webhook secret of at least 32 characters"
	hookR := newWebhookReceiver(t, ca, secret)
	ctx := context.Background()
	for i := range 12 {
		if err := tr.rec.Record(ctx, audit.Event{ID: fmt.Sprintf("e%d", i), Kind: audit.SignIn.Name, Project: "p1"}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.EventuallyWithin(t, 10*time.Second, "12 events stored", func() bool { return len(tr.stored(t, "p1")) == 12 })
	tr.cutOut(t, "p1", 5)
	d, err := NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
	if err != nil {
		t.Fatal(err)
	}
	tr.sink(t, d) // gives up on missing events after 2 minutes: well after this test's wait
	if err := tr.rec.Record(ctx, audit.Event{ID: "after", Kind: audit.SignIn.Name, Project: "p1"}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for seq := int64(1); seq <= 13; seq++ {
		if seq != 5 {
			want = append(want, audit.ID("p1", seq))
		}
	}
	testenv.EventuallyWithin(t, 10*time.Second, "every event but the deleted one", func() bool { return hookR.count() >= len(want) })
	got, errs := hookR.arrivals()
	var ids []string
	for _, a := range got {
		ids = append(ids, a.id)
	}
	if len(errs) > 0 || strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("arrived %v (%v), want %v", ids, errs, want)
	}
}

// Events retention removed before a sink delivered them are gone: the
// sink goes on after them, without waiting for them.
func TestRetainedEventsPassedOver(t *testing.T) {
	tr := newTrail(t)
	ca := newTestCA(t)
	const secret = "a webhook secret of at least 32 characters"
	hookR := newWebhookReceiver(t, ca, secret)
	ctx := context.Background()
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	record := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := tr.rec.Record(ctx, audit.Event{ID: fmt.Sprintf("e%d", i), Kind: audit.SignIn.Name, Project: "p1", Time: old.Add(time.Duration(i) * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sink := func() func() {
		d, err := NewWebhook(WebhookConfig{URL: hookR.url(), Secret: secret, TLS: ca.client()})
		if err != nil {
			t.Fatal(err)
		}
		return tr.sink(t, d)
	}
	stop := sink()
	record(1, 3)
	testenv.EventuallyWithin(t, 10*time.Second, "the first 3 events delivered", func() bool { return hookR.count() == 3 })
	stop()
	record(4, 12)
	testenv.EventuallyWithin(t, 10*time.Second, "12 events stored", func() bool { return len(tr.stored(t, "p1")) == 12 })
	rm, err := audit.Retain(ctx, tr.repo, tr.rec, "p1", old.Add(9*time.Second), quiet)
	if err != nil || rm == nil || rm.From != 1 || rm.To != 8 {
		t.Fatalf("removed %+v, %v", rm, err)
	}
	sink() // gives up on missing events after 2 minutes: well after this test's wait
	var want []string
	for _, seq := range []int64{1, 2, 3, 9, 10, 11, 12, 13} { // 13: the retention event
		want = append(want, audit.ID("p1", seq))
	}
	testenv.EventuallyWithin(t, 10*time.Second, "the events kept delivered", func() bool { return hookR.count() >= len(want) })
	got, errs := hookR.arrivals()
	var ids []string
	for _, a := range got {
		ids = append(ids, a.id)
	}
	if len(errs) > 0 || strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("arrived %v (%v), want %v", ids, errs, want)
	}
}
