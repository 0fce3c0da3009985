// Command pinion-bench measures Pinion over loopback: it starts a standalone
// stack on a fresh data directory (or one kept with -data, or targets -url),
// seeds data, optionally grows it (-grow), and drives each operation with
// concurrent clients for a fixed time, next to two
// ceilings measured in the same run: a bare Fiber handler returning a fixed
// body, and one NATS request/reply round trip. Load goes to loopback only,
// bounded in time.
//
// The seeded Patients are a population (people.go): skewed surnames,
// given names, birth dates over a century, genders, cities.
//
// The writes (create; update; tx10, a transaction Bundle of 10 Patient
// creates) and each form of $execute (bots) are issue 38's measures: each
// runs at -c clients and at one (tx10 at -c only), and its label ends with
// the store's size, the Patients the bench seeded and grew to two
// significant figures ("POST Patient (1k)", "PUT Patient/<id> (1 client,
// 100k)"; the Patients the creates themselves add are not counted, so the
// labels of two builds match). With -grow they run twice in one run: at
// the seeded size, then again after growth; the other ops run after growth
// only. So make bench-compare ONLY=create,update,tx10 BENCH_FLAGS='-grow
// 100000' shows each at 1k and at 100k.
//
// -only shapes (make bench-search; not part of the default set, as it
// grows the store) times issue 39's search shapes one client at a time
// (-shape-requests after 20 to warm up, at most -shape-time each) and a
// 16-client name=<prefix> search: in the bench project at its seeded
// size ("search 1k: …"), in a small project of 1,000 Patients beside it
// ("small beside 1k: …"), then after growing the bench project (to
// 100,000 unless -grow says otherwise) in both again ("search 100k: …",
// "small beside 100k: …").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"
	"github.com/valyala/fasthttp"

	"github.com/pinion-health/pinion/deploy/standalone"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/embedded"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

var (
	duration   = flag.Duration("d", 10*time.Second, "measuring time per operation")
	warmup     = flag.Duration("warmup", 2*time.Second, "warm-up time per operation")
	clients    = flag.Int("c", 16, "concurrent clients")
	only       = flag.String("only", "", "comma-separated operation names to run (default all)")
	seedN      = flag.Int("patients", 1000, "patients to seed")
	membersN   = flag.Int("members", 200, "members to seed by invitation")
	cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of each measured operation to this path plus .<operation>.pprof (go tool pprof); warm-up and seeding are left out")
	memProfile = flag.String("memprofile", "", "write a heap profile at the end of each measured operation to this path plus .<operation>.pprof (go tool pprof -sample_index=inuse_space): what the server keeps live, with the server in this process")
	traceOut   = flag.String("trace", "", "write a runtime execution trace of each measured operation to this path plus .<operation>.trace (go tool trace): where a slow request waited, with the server in this process")
	growN      = flag.Int("grow", 0, "patients to load in transaction Bundles after seeding, before measuring; the writes and bots are measured before it too (-only shapes: up to 100,000 in the project unless given)")
	dataDir    = flag.String("data", "", "data directory to keep and reuse (default: a temporary one, removed at exit)")
	auditReads = flag.Bool("audit-reads", true, "the bench project records reads of patients' records in the audit trail (its auditReads setting); false measures reads without those events")
	target     = flag.String("url", "", "base URL of a running Pinion to measure instead of starting one (super-admin from PINION_SUPERADMIN_CLIENT_ID/SECRET or -data's superadmin.json)")
)

// bare is the bare Fiber handler's figures of this run, at -c clients and
// at one (zero when -only leaves it out), which the read is reported
// against (nearLimit).
var bare struct{ many, one result }

// nearLimit says how close a read by id comes to the bare handler measured
// in the same run (issue 56): its throughput at -c clients as a share of
// the handler's, and what the gateway, the bus and the store add to the
// one-client median.
func nearLimit(many, one result) {
	if bare.many.rps == 0 || bare.one.p50 == 0 {
		return
	}
	fmt.Printf("near the limit: read by id at %d clients is %.0f%% of the bare Fiber handler's req/s (target 50%%); "+
		"at 1 client its p50 is %.3f ms against the handler's %.3f ms: %.3f ms added (target 0.150)\n",
		*clients, 100*many.rps/bare.many.rps, ms(one.p50), ms(bare.one.p50), ms(one.p50-bare.one.p50))
}

// result is one operation's figures.
type result struct {
	name          string
	n, errs       int64
	rps           float64
	p50, p90, p99 time.Duration
	cpu           time.Duration // server CPU per request; 0 when not known
}

func (r result) String() string {
	s := fmt.Sprintf("%-44s %9.0f req/s  p50 %7.3f ms  p90 %7.3f ms  p99 %7.3f ms  errors %d",
		r.name, r.rps, ms(r.p50), ms(r.p90), ms(r.p99), r.errs)
	if r.cpu > 0 {
		s += fmt.Sprintf("  cpu %7.3f ms/req", ms(r.cpu))
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// drive runs op from c goroutines for warm-up plus duration and reports the
// measured part. op returns false on an error.
func drive(name string, c int, op func(worker int, i int) bool) result {
	return driveWaiting(name, c, nil, op)
}

// driveWaiting is drive with wait, untimed, before each operation (to pace
// the clients).
func driveWaiting(name string, c int, wait func(worker int), op func(worker int, i int) bool) result {
	var stop atomic.Bool
	var measuring atomic.Bool
	lat := make([][]time.Duration, c)
	errs := make([]int64, c)
	var wg sync.WaitGroup
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if wait != nil {
					wait(w)
				}
				t0 := time.Now()
				ok := op(w, i)
				d := time.Since(t0)
				if measuring.Load() {
					lat[w] = append(lat[w], d)
					if !ok {
						errs[w]++
					}
				}
			}
		}(w)
	}
	time.Sleep(*warmup)
	stopProfile := profile(name)
	cpu0 := cpuTime()
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1 := cpuTime()
	stopProfile()
	stop.Store(true)
	wg.Wait()
	var all []time.Duration
	var nerrs int64
	for w := range lat {
		all = append(all, lat[w]...)
		nerrs += errs[w]
	}
	r := summarize(name, all, nerrs, elapsed)
	if cpu0 >= 0 && cpu1 >= 0 && r.n > 0 {
		r.cpu = (cpu1 - cpu0) / time.Duration(r.n)
	}
	fmt.Println(r)
	return r
}

// profile starts a CPU profile and an execution trace of the measured
// part of op name, and writes a heap profile at its end, server included
// when it runs in this process, as -cpuprofile, -trace and -memprofile ask.
func profile(name string) (stop func()) {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	var stops []func()
	if *cpuProfile != "" {
		f := createFile(*cpuProfile + "." + slug + ".pprof")
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	if *traceOut != "" {
		f := createFile(*traceOut + "." + slug + ".trace")
		if err := trace.Start(f); err != nil {
			fail(err)
		}
		stops = append(stops, func() { trace.Stop(); _ = f.Close() })
	}
	if *memProfile != "" {
		stops = append(stops, func() {
			f := createFile(*memProfile + "." + slug + ".pprof")
			runtime.GC() // the profile's live objects are as of the last collection
			if err := pprof.WriteHeapProfile(f); err != nil {
				fail(err)
			}
			_ = f.Close()
		})
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

func createFile(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	return f
}

// optIn are the ops that run only when -only names them.
var optIn = map[string]bool{"shapes": true}

func wanted(name string) bool {
	if *only == "" {
		return !optIn[name]
	}
	for _, o := range strings.Split(*only, ",") {
		if strings.TrimSpace(o) == name {
			return true
		}
	}
	return false
}

func main() {
	worker.MainIfWorker() // the stack it starts runs bots in this binary
	flag.Parse()
	fmt.Printf("pinion-bench: %d clients, %s per operation after %s warm-up, loopback only\n", *clients, *duration, *warmup)

	// Ceiling 1: a bare Fiber handler.
	if wanted("fiber") {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		body := []byte(`{"resourceType":"Patient","id":"x"}`)
		app.Get("/x", func(c *fiber.Ctx) error { return c.Send(body) })
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go app.Listener(ln)
		hc := newClient()
		url := "http://" + ln.Addr().String() + "/x"
		bare.many = drive("ceiling: bare Fiber GET", *clients, func(int, int) bool { return hc.get(url, "") == 200 })
		bare.one = drive("ceiling: bare Fiber GET (1 client)", 1, func(int, int) bool { return hc.get(url, "") == 200 })
		_ = app.Shutdown()
	}
	// Ceiling 2: one NATS request/reply round trip (in-process connection, as the standalone uses).
	if wanted("nats") {
		dir, _ := os.MkdirTemp("", "pinion-bench-nats-")
		ns, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir, NoListen: true})
		if err != nil {
			fail(err)
		}
		nc, _ := nats.Connect("", nats.InProcessServer(ns))
		_, _ = nc.QueueSubscribe("echo", "q", func(m *nats.Msg) { _ = m.Respond(m.Data) })
		drive("ceiling: NATS request/reply", *clients, func(int, int) bool {
			_, err := nc.Request("echo", []byte("ping"), 5*time.Second)
			return err == nil
		})
		drive("ceiling: NATS request/reply (1 client)", 1, func(int, int) bool {
			_, err := nc.Request("echo", []byte("ping"), 5*time.Second)
			return err == nil
		})
		nc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
	}

	dir := *dataDir
	if dir == "" && *target == "" {
		dir, _ = os.MkdirTemp("", "pinion-bench-")
		defer os.RemoveAll(dir)
	}
	b := &bench{hc: newClient(), dir: dir}
	b.credentials()
	saved := loadState(dir)
	if *target != "" {
		b.base = strings.TrimSuffix(*target, "/") + "/"
	} else {
		st := b.start(saved)
		defer st.Close()
	}
	b.waitReady()
	b.login()
	b.started = time.Now().UTC().Add(-time.Second).Truncate(time.Second)
	if saved != nil {
		b.reuse(saved)
	} else {
		b.seed(*seedN)
		b.seedMembers(*membersN)
		b.saveState()
	}
	grow := *growN
	if wanted("shapes") {
		b.shapesBefore()
		if !flagGiven("grow") {
			grow = max(shapesGrow-len(b.patients), 0)
		}
	}
	if grow > 0 && (wanted("create") || wanted("tx10") || wanted("update") || wanted("bots")) {
		// The write and bot ops at the seeded size first; run measures
		// them again once grown, each line labelled with its size.
		size := storeSize(len(b.patients))
		b.creates(size)
		b.updates(size)
		b.bots(size)
	}
	if grow > 0 {
		b.grow(grow)
		b.saveState()
		b.login() // tokens last an hour; a long load may outlive them
		b.footprint("after growth")
	}
	b.run()
	b.footprint("at the end")
}

// start runs the standalone stack in this process on the bench's data directory.
func (b *bench) start(saved *state) *standalone.Stack {
	// A database of its own per run: a PostgreSQL server outlives runs,
	// and an earlier run's data would skew this one's figures. A kept
	// directory names the one it grew.
	db := fmt.Sprintf("bench%d", time.Now().Unix())
	if saved != nil && saved.Database != "" {
		db = saved.Database
	}
	b.db = db
	env := map[string]string{
		"PINION_ADDR": "127.0.0.1:0", "PINION_DATA_DIR": b.dir,
		"PINION_AUTH_RATE_LIMIT": "0", "PINION_LOG_LEVEL": "error",
		"PINION_STORE":                   os.Getenv("PINION_STORE"),
		"PINION_FERRETDB_POSTGRESQL_URL": os.Getenv("PINION_FERRETDB_POSTGRESQL_URL"),
		"PINION_MONGODB_DATABASE":        db,
		// The subscriptions op posts rest-hooks to a server of its own on loopback.
		"PINION_REST_HOOK_ALLOW_PRIVATE": "true",
	}
	if !b.savedSuper {
		env["PINION_SUPERADMIN_CLIENT_ID"], env["PINION_SUPERADMIN_CLIENT_SECRET"] = b.superID, b.superSecret
	}
	cfg, err := config.LoadFrom(func(k string) string { return env[k] })
	if err != nil {
		fail(err)
	}
	st, err := standalone.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fail(err)
	}
	b.base, b.inProcess, b.stack = "http://"+st.Addr+"/", true, st
	return st
}

// flagGiven tells whether the command line set the flag name.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pinion-bench:", err)
	os.Exit(1)
}

// httpClient is a fasthttp client: it costs the shared CPU less than net/http.
type httpClient struct{ c *fasthttp.Client }

func newClient() *httpClient {
	return &httpClient{c: &fasthttp.Client{MaxConnsPerHost: 256, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}}
}

func (h *httpClient) do(method, url, token, ct string, body []byte) (int, []byte) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(url)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ct != "" {
		req.Header.SetContentType(ct)
	}
	req.SetBody(body)
	if err := h.c.Do(req, resp); err != nil {
		return 0, nil
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

func (h *httpClient) get(url, token string) int {
	st, _ := h.do("GET", url, token, "", nil)
	return st
}
