// Package load drives a mixed workload through the gateway (tokens, invites,
// member searches, resource CRUD, bot executions), bounded in time and
// count and aimed at loopback only, and records every acknowledged write so
// Verify can check afterwards that none was lost and none was doubled.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config says what to drive.
type Config struct {
	Base             string // gateway base URL, http://127.0.0.1:port/
	ClientID, Secret string // a super-admin client
	ProjectID        string
	BotID            string // an echo bot in the project
	Workers          int
	Duration         time.Duration
	MaxOps           int
	// Deadline is how long any request may take before it counts as a hang.
	Deadline time.Duration
	// Tag keeps apart the invited addresses of runs driven at once.
	Tag string
	// BotsOnly runs only the echo bot, a load that does not touch the
	// store (the mix otherwise).
	BotsOnly bool
}

// Write is one acknowledged write.
type Write struct {
	Kind    string // patient-version, membership
	ID      string
	Version string
	Email   string
}

// Stats counts what happened, per second too.
type Stats struct {
	Ops, Acked, Refused, NoResponse, Hangs int
	ByStatus                               map[int]int
	Latencies                              []time.Duration
	PerSecond                              []int // acknowledged operations in each second
	FailedPerSecond                        []int // the others (refused, unanswered, hung)
}

// count adds one to the second at of a per-second series.
func count(series *[]int, at time.Duration) {
	sec := int(at.Seconds())
	for len(*series) <= sec {
		*series = append(*series, 0)
	}
	(*series)[sec]++
}

// Result is a run's outcome.
type Result struct {
	Writes []Write
	Emails []string // every invited address, acknowledged or not
	Reads  []string // the Patients whose read was answered 200
	Stats  Stats
}

type runner struct {
	cfg    Config
	hc     *http.Client
	mu     sync.Mutex
	res    Result
	start  time.Time
	tokenM sync.Mutex
	token  string
}

// Run drives the workload until the duration, the op count or ctx ends.
func Run(ctx context.Context, cfg Config) *Result {
	r := &runner{cfg: cfg, hc: &http.Client{Timeout: cfg.Deadline}, start: time.Now()}
	r.res.Stats.ByStatus = map[int]int{}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var opsLeft = make(chan struct{}, cfg.MaxOps)
	for i := 0; i < cfg.MaxOps; i++ {
		opsLeft <- struct{}{}
	}
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []Write // this worker's patients, to update and read
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case <-opsLeft:
				default:
					return
				}
				mine = r.op(ctx, w, i, mine)
			}
		}(w)
	}
	wg.Wait()
	return &r.res
}

// call makes one request and classifies its answer.
func (r *runner) call(ctx context.Context, method, path, ct string, body []byte, auth bool) (int, []byte) {
	req, err := http.NewRequest(method, r.cfg.Base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+r.currentToken(ctx))
	}
	t0 := time.Now()
	resp, err := r.hc.Do(req)
	var b []byte
	status := 0
	if err == nil {
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
	}
	d := time.Since(t0)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		// Nothing listens (the gateway is restarting): wait a little, as a
		// client would, rather than spin.
		time.Sleep(50 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.res.Stats
	s.Ops++
	s.Latencies = append(s.Latencies, d)
	var ne net.Error
	switch {
	case err != nil && errors.As(err, &ne) && ne.Timeout():
		s.Hangs++
	case err != nil:
		s.NoResponse++ // nothing listening: the gateway was down
	case status < 300:
		s.Acked++
		count(&s.PerSecond, time.Since(r.start))
	default:
		s.Refused++
	}
	if err != nil || status >= 300 {
		count(&s.FailedPerSecond, time.Since(r.start))
	}
	if status != 0 {
		s.ByStatus[status]++
	}
	if status == 401 && auth {
		r.tokenM.Lock()
		r.token = ""
		r.tokenM.Unlock()
	}
	return status, b
}

func (r *runner) currentToken(ctx context.Context) string {
	r.tokenM.Lock()
	defer r.tokenM.Unlock()
	if r.token == "" {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {r.cfg.ClientID}, "client_secret": {r.cfg.Secret}}
		req, _ := http.NewRequest("POST", r.cfg.Base+"oauth2/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if resp, err := r.hc.Do(req); err == nil {
			var t struct {
				AccessToken string `json:"access_token"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&t)
			resp.Body.Close()
			r.token = t.AccessToken
		}
	}
	return r.token
}

func (r *runner) record(w Write) {
	r.mu.Lock()
	r.res.Writes = append(r.res.Writes, w)
	r.mu.Unlock()
}

// op runs the i-th operation of worker w.
func (r *runner) op(ctx context.Context, w, i int, mine []Write) []Write {
	fhirJSON := "application/fhir+json"
	if r.cfg.BotsOnly {
		i = 8
	}
	switch i % 10 {
	case 0:
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {r.cfg.ClientID}, "client_secret": {r.cfg.Secret}}
		r.call(ctx, "POST", "oauth2/token", "application/x-www-form-urlencoded", []byte(form.Encode()), false)
	case 1, 2, 3:
		body, _ := json.Marshal(map[string]any{"resourceType": "Patient",
			"name": []any{map[string]any{"family": fmt.Sprintf("Load%d", w), "given": []any{fmt.Sprint(i)}}}})
		if st, b := r.call(ctx, "POST", "fhir/R4/Patient", fhirJSON, body, true); st == 201 {
			if wr, ok := versionOf(b); ok {
				r.record(wr)
				mine = append(mine, wr)
			}
		}
	case 4:
		if len(mine) > 0 {
			p := mine[i%len(mine)]
			body, _ := json.Marshal(map[string]any{"resourceType": "Patient", "id": p.ID, "gender": []string{"male", "female", "other"}[i%3]})
			if st, b := r.call(ctx, "PUT", "fhir/R4/Patient/"+p.ID, fhirJSON, body, true); st == 200 {
				if wr, ok := versionOf(b); ok {
					r.record(wr)
				}
			}
		}
	case 5:
		if len(mine) > 0 {
			id := mine[i%len(mine)].ID
			if st, _ := r.call(ctx, "GET", "fhir/R4/Patient/"+id, "", nil, true); st == 200 {
				r.mu.Lock()
				r.res.Reads = append(r.res.Reads, id)
				r.mu.Unlock()
			}
		}
	case 6:
		r.call(ctx, "GET", "fhir/R4/ProjectMembership?_project="+r.cfg.ProjectID+"&profile-type=Practitioner&_count=20", "", nil, true)
	case 7:
		email := fmt.Sprintf("load-%s%d-%d-%d@example.com", r.cfg.Tag, r.start.UnixNano()%1e6, w, i)
		r.mu.Lock()
		r.res.Emails = append(r.res.Emails, email)
		r.mu.Unlock()
		body, _ := json.Marshal(map[string]any{"resourceType": "Practitioner", "firstName": "Load", "lastName": "Test", "email": email, "sendEmail": false})
		if st, b := r.call(ctx, "POST", "admin/projects/"+r.cfg.ProjectID+"/invite", "application/json", body, true); st == 200 {
			var m struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &m) == nil && m.ID != "" {
				r.record(Write{Kind: "membership", ID: m.ID, Email: email})
			}
		}
	case 8:
		r.call(ctx, "POST", "fhir/R4/Bot/"+r.cfg.BotID+"/$execute", "application/json", []byte(`{"n":1}`), true)
	case 9:
		r.call(ctx, "GET", fmt.Sprintf("fhir/R4/Patient?family=load%d&_count=10", w), "", nil, true)
	}
	return mine
}

func versionOf(b []byte) (Write, bool) {
	var p struct {
		ID   string `json:"id"`
		Meta struct {
			VersionID string `json:"versionId"`
		} `json:"meta"`
	}
	if json.Unmarshal(b, &p) != nil || p.ID == "" {
		return Write{}, false
	}
	return Write{Kind: "patient-version", ID: p.ID, Version: p.Meta.VersionID}, true
}

// Report is what Verify found.
type Report struct {
	Checked, Lost, DuplicateUsers, DuplicateMembers int
	Problems                                        []string
}

// Verify checks every acknowledged write is there (each Patient version in
// its history, each membership readable) and that no invited address has
// more than one user or membership.
func Verify(ctx context.Context, cfg Config, res *Result) *Report {
	r := &runner{cfg: cfg, hc: &http.Client{Timeout: 30 * time.Second}, start: time.Now()}
	r.res.Stats.ByStatus = map[int]int{}
	rep := &Report{}
	for _, w := range res.Writes {
		rep.Checked++
		path := "fhir/R4/Patient/" + w.ID + "/_history/" + w.Version
		if w.Kind == "membership" {
			path = "fhir/R4/ProjectMembership/" + w.ID
		}
		if st, _ := r.call(ctx, "GET", path, "", nil, true); st != 200 {
			rep.Lost++
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s/%s: %d", w.Kind, w.ID, w.Version, st))
		}
	}
	for _, email := range res.Emails {
		st, b := r.call(ctx, "GET", "fhir/R4/User?email="+url.QueryEscape(email), "", nil, true)
		users := entries(b)
		if st != 200 || len(users) > 1 {
			rep.DuplicateUsers += max(0, len(users)-1)
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d users (%d)", email, len(users), st))
		}
		for _, u := range users {
			_, b := r.call(ctx, "GET", "fhir/R4/ProjectMembership?user=User/"+u+"&_project="+cfg.ProjectID, "", nil, true)
			if n := len(entries(b)); n > 1 {
				rep.DuplicateMembers += n - 1
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d memberships", email, n))
			}
		}
	}
	sort.Strings(rep.Problems)
	return rep
}

func entries(b []byte) []string {
	var bundle struct {
		Entry []struct {
			Resource struct {
				ID string `json:"id"`
			} `json:"resource"`
		} `json:"entry"`
	}
	_ = json.Unmarshal(b, &bundle)
	var ids []string
	for _, e := range bundle.Entry {
		ids = append(ids, e.Resource.ID)
	}
	return ids
}

// Percentile of the recorded latencies.
func (s *Stats) Percentile(p float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), s.Latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[int(float64(len(l)-1)*p)]
}
