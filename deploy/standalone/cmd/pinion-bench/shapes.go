package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// The shapes op (issue 39) times each search shape alone, one client after
// another, in the bench project before it grows and after, and in a small
// project of its own beside it, before and after: a shape's cost should
// follow the page, not the matches, and never another project's rows.
var (
	shapeRequests = flag.Int("shape-requests", 200, "shapes: sequential requests per shape (after 20 to warm up)")
	shapeTime     = flag.Duration("shape-time", 10*time.Second, "shapes: at most this long per shape, whichever comes first")
)

// The shapes op's sizes: the bench project's patients after growth when
// -grow is not given, and the small project's.
const (
	shapesGrow = 100_000
	smallN     = 1000
)

const shapeWarmup = 20

// shape is one query, the path after fhir/R4/; project marks the
// membership search, read as the members op reads it, with the
// super-admin's token, which sees every project's: it names the project
// measured.
type shape struct {
	label, path string
	project     bool
}

// shapes are issue 39's search shapes, all of a page of 20; since is the
// _lastUpdated bound, before the bench loaded anything.
func shapes(since time.Time) []shape {
	s := []shape{
		{"name=mar", "Patient?name=mar", false},
		{"family=Smith", "Patient?family=Smith", false},
		{"birthdate=ge1940-01-01", "Patient?birthdate=ge1940-01-01", false},
		{"_sort=family", "Patient?_sort=family", false},
		{"name:contains=mit", "Patient?name:contains=mit", false},
		{"_total=accurate", "Patient?_total=accurate", false},
		{"_sort=-_lastUpdated", "Patient?_sort=-_lastUpdated", false},
		{"gender=female", "Patient?gender=female", false},
		{"_offset=1000", "Patient?_offset=1000", false},
		{"gender=female&_sort=birthdate", "Patient?gender=female&_sort=birthdate", false},
		{"_lastUpdated=gt<start>", "Patient?_lastUpdated=gt" + url.QueryEscape(since.UTC().Format(time.RFC3339)), false},
		{"_offset=980 (page 50)", "Patient?_offset=980", false},
		{"ProjectMembership?profile-type=Patient", "ProjectMembership?profile-type=Patient", true},
	}
	for i := range s {
		s[i].path += "&_count=20"
	}
	return s
}

// kilo writes a count as the labels show it: 1000 as 1k, 100000 as 100k.
func kilo(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return strconv.FormatFloat(float64(n)/1000, 'f', -1, 64) + "k"
}

// shapesBefore measures the bench project at its initial size, then makes
// the small project and measures it beside the bench project as it is.
func (b *bench) shapesBefore() {
	size := kilo(len(b.patients))
	b.measureShapes("search "+size, b.token, b.project)
	b.small = b.smallProject()
	b.measureShapes("small beside "+size, b.smallLogin(), b.small)
}

// shapesAfter measures both projects again, the bench project grown.
func (b *bench) shapesAfter() {
	size := kilo(len(b.patients))
	b.measureShapes("search "+size, b.token, b.project)
	b.measureShapes("small beside "+size, b.smallLogin(), b.small)
}

// measureShapes runs each shape one request after another against
// project, then 16 clients searching name=<prefix> in turn.
func (b *bench) measureShapes(label, token, project string) {
	for _, sh := range shapes(b.started) {
		tok, path := token, sh.path
		if sh.project {
			tok, path = b.super, path+"&project=Project/"+project
		}
		b.sequential(label+": "+sh.label, b.base+"fhir/R4/"+path, tok)
	}
	drive(fmt.Sprintf("%s: name=<prefix> (%d clients)", label, *clients), *clients, func(w, i int) bool {
		return b.hc.get(b.base+"fhir/R4/Patient?_count=20&name="+namePrefixes[(w+i)%len(namePrefixes)], token) == 200
	})
}

// sequential times one client's requests of u, after a warm-up, bounded
// by -shape-requests and -shape-time, and prints them as drive does, with
// the page's size and the total when the server gave one.
func (b *bench) sequential(name, u, token string) result {
	t0 := time.Now()
	st, body := b.hc.do("GET", u, token, "", nil)
	if st != 200 {
		// A build without the shape says so, and the others still run.
		fmt.Printf("%-44s refused: %d %.300s\n", name, st, body)
		return result{name: name}
	}
	var page struct {
		Total *int `json:"total"`
		Entry []json.RawMessage
	}
	_ = json.Unmarshal(body, &page)
	for i := 1; i < shapeWarmup && time.Since(t0) < *shapeTime/4; i++ {
		b.hc.get(u, token)
	}
	var lat []time.Duration
	var errs int64
	t0 = time.Now()
	for len(lat) < *shapeRequests && time.Since(t0) < *shapeTime {
		t := time.Now()
		if b.hc.get(u, token) != 200 {
			errs++
		}
		lat = append(lat, time.Since(t))
	}
	r := summarize(name, lat, errs, time.Since(t0))
	note := fmt.Sprintf("page %d", len(page.Entry))
	if page.Total != nil {
		note += fmt.Sprintf(" of %d", *page.Total)
	}
	fmt.Printf("%s  %s  n %d\n", r, note, r.n)
	return r
}

// summarize gives the figures of the latencies lat, taken over elapsed.
func summarize(name string, lat []time.Duration, errs int64, elapsed time.Duration) result {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r := result{name: name, n: int64(len(lat)), errs: errs}
	if r.n > 0 {
		r.rps = float64(r.n) / elapsed.Seconds()
		r.p50 = lat[len(lat)*50/100]
		r.p90 = lat[len(lat)*90/100]
		r.p99 = lat[len(lat)*99/100]
	}
	return r
}

// smallProject makes a project beside the bench's, as the bench's is made
// (admin API), with a client, a few members and smallN Patients of the
// same population, loaded in transaction Bundles.
func (b *bench) smallProject() string {
	p := b.mustJSON("POST", "admin/Project", b.super, "application/json", map[string]any{"resourceType": "Project", "name": "small beside bench"}, 201)
	project := p["id"].(string)
	c := b.mustJSON("POST", "admin/projects/"+project+"/client", b.super, "application/json", map[string]any{"name": "small client"}, 201)
	b.smallClient, b.smallSecret = c["id"].(string), c["secret"].(string)
	token := b.smallLogin()
	for i := 0; i < 10; i++ {
		typ := "Practitioner"
		if i%2 == 0 {
			typ = "Patient"
		}
		b.mustJSON("POST", "admin/projects/"+project+"/invite", b.super, "application/json", map[string]any{
			"resourceType": typ, "firstName": "Small", "lastName": strconv.Itoa(i),
			"email": fmt.Sprintf("small-%s-%d@bench.example", project, i), "sendEmail": false}, 200)
	}
	t0 := time.Now()
	for from := 0; from < smallN; from += growBatch {
		if _, failed, err := b.loadBundle(token, from, min(from+growBatch, smallN)); failed > 0 {
			fail(fmt.Errorf("small project: %w", err))
		}
	}
	fmt.Printf("  small project %s: %d patients in %s\n", project, smallN, time.Since(t0).Round(time.Millisecond))
	return project
}

// smallLogin answers a fresh token of the small project's client (a
// growth may outlive the last one).
func (b *bench) smallLogin() string { return b.tokenFor(b.smallClient, b.smallSecret) }
