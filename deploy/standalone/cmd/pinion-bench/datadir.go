package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// stateFile, in a data directory the bench used, names the project it
// seeded (and grew), so a later run with -data measures that project
// again rather than a fresh, small one next to it.
const stateFile = "pinion-bench.json"

type state struct {
	Database string    `json:"database"`
	Project  string    `json:"project"`
	ClientID string    `json:"clientId"`
	Secret   string    `json:"clientSecret"`
	Patients []string  `json:"patients"`
	Started  time.Time `json:"started"`
}

// loadState reads dir's stateFile; nil when there is none.
func loadState(dir string) *state {
	if dir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if os.IsNotExist(err) {
		return nil
	}
	var s state
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		fail(fmt.Errorf("%s: %w", stateFile, err))
	}
	return &s
}

func (b *bench) saveState() {
	if b.dir == "" {
		return
	}
	data, _ := json.Marshal(state{Database: b.db, Project: b.project, ClientID: b.clientID, Secret: b.secret, Patients: b.patients, Started: b.started})
	if err := os.WriteFile(filepath.Join(b.dir, stateFile), data, 0o600); err != nil {
		fail(err)
	}
}

// reuse takes up the project an earlier run left in the data directory.
func (b *bench) reuse(s *state) {
	b.project, b.clientID, b.secret, b.patients = s.Project, s.ClientID, s.Secret, s.Patients
	if !s.Started.IsZero() {
		b.started = s.Started
	}
	b.token = b.tokenFor(b.clientID, b.secret)
	fmt.Printf("  reusing %s: project %s, %d patients known\n", b.dir, b.project, len(b.patients))
}

// credentials picks the super-admin client: the one the stack generated and
// saved in the data directory (superadmin.json) when there is one, for a
// remote stack the one in the environment, else the bench's own, given to
// the stack it starts.
func (b *bench) credentials() {
	b.superID, b.superSecret = "bench-superadmin", strings.Repeat("b", 40)
	if *target != "" && os.Getenv("PINION_SUPERADMIN_CLIENT_ID") != "" {
		b.superID, b.superSecret = os.Getenv("PINION_SUPERADMIN_CLIENT_ID"), os.Getenv("PINION_SUPERADMIN_CLIENT_SECRET")
	}
	if b.dir == "" {
		return
	}
	data, err := os.ReadFile(filepath.Join(b.dir, "superadmin.json"))
	var saved struct {
		ClientID     string `json:"clientId"`
		ClientSecret string `json:"clientSecret"`
	}
	if err == nil && json.Unmarshal(data, &saved) == nil && saved.ClientID != "" && saved.ClientSecret != "" {
		b.superID, b.superSecret, b.savedSuper = saved.ClientID, saved.ClientSecret, true
	}
}

// footprint prints the resident memory of this process when the stack runs
// in it, and the data directory's size, also per 1,000 of the project's
// Patients (the directory holds everything else too: histories, indexes,
// NATS streams, other projects).
func (b *bench) footprint(when string) {
	var parts []string
	if b.inProcess {
		parts = append(parts, "RSS "+mib(vmRSS())+" (bot workers not counted)")
	}
	if b.dir != "" {
		size, n := dirSize(b.dir), b.patientCount()
		per := "-"
		if n > 0 {
			per = mib(size * 1000 / n)
		}
		parts = append(parts, fmt.Sprintf("data dir %s, %s per 1,000 of %d Patients", mib(size), per, n))
		if os.Getenv("PINION_FERRETDB_POSTGRESQL_URL") != "" {
			parts = append(parts, "documents in PostgreSQL, not in the data dir")
		}
	}
	if len(parts) > 0 {
		fmt.Printf("%-44s %s\n", "footprint "+when, strings.Join(parts, "; "))
	}
}

// vmRSS is this process's resident set in bytes, from /proc/self/status.
func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirSize adds up the sizes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil // files come and go under a running stack
	})
	return n
}

// patientCount asks the server how many Patients the bench project holds.
func (b *bench) patientCount() int64 {
	st, body := b.hc.do("GET", b.base+"fhir/R4/Patient?_summary=count", b.token, "", nil)
	var out struct {
		Total int64 `json:"total"`
	}
	if st != 200 || json.Unmarshal(body, &out) != nil {
		return int64(len(b.patients))
	}
	return out.Total
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
