package standalone

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/rss"
)

// bounded runs one hostile request and fails when the process's resident
// memory grew by more than limit while it ran.
func bounded(t *testing.T, limit int64, f func() *response) *response {
	t.Helper()
	stop := rss.Watch(nil)
	start := time.Now()
	r := f()
	grew := stop()
	t.Logf("status %d in %v, resident memory grew %d MiB", r.status, time.Since(start).Round(time.Millisecond), grew>>20)
	if grew > limit {
		t.Fatalf("resident memory grew by %d MiB (limit %d MiB)", grew>>20, limit>>20)
	}
	return r
}

// doubling is a JSON Patch whose copies double an array twenty times: a
// kilobyte would become a gigabyte.
func doubling(path string) string {
	ops := []string{`{"op":"add","path":"` + path + `","value":[{"url":"http://example.com/x","valueString":"` + strings.Repeat("x", 1000) + `"}]}`}
	for i := 0; i < 20; i++ {
		ops = append(ops, `{"op":"copy","from":"`+path+`","path":"`+path+`/-"}`)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// Every way to patch refuses a patch whose copies would grow the resource
// past the limit: 413 before the memory is spent, nothing written.
func TestPatchAmplification(t *testing.T) {
	pid, su := adminProject(t, "Patch bombs")
	m := member(t, su, pid, "resourceType", "Patient", "firstName", "Pat", "lastName", "Bomb",
		"email", "patch-bomb@example.com", "password", "patch bomb password")
	user := signIn(t, "patch-bomb@example.com", "patch bomb password", pid, "openid")["access_token"].(string)
	admin := projectAdmin(t, su, pid, "patch-bomb-admin@example.com")
	r := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", patient("Bomb"))
	expect(t, r, 201)
	pat := r.json(t)["id"].(string)
	userID := idOf(refOf(m, "user"))
	const limit = 200 << 20

	t.Run("own User", func(t *testing.T) {
		before := snapshot(t, su, "User", userID).vid
		r := bounded(t, limit, func() *response {
			return do(t, "PATCH", "fhir/R4/User/"+userID, user, "application/json-patch+json", []byte(doubling("/extension")))
		})
		expectOutcome(t, r, 413, "copy operations would add more than")
		if v := snapshot(t, su, "User", userID).vid; v != before {
			t.Fatalf("user written: version %s", v)
		}
	})
	t.Run("batch entry", func(t *testing.T) {
		bundle := `{"resourceType":"Bundle","type":"batch","entry":[{"request":{"method":"PATCH","url":"Patient/` + pat + `"},` +
			`"resource":{"resourceType":"Binary","contentType":"application/json-patch+json","data":"` +
			base64.StdEncoding.EncodeToString([]byte(doubling("/extension"))) + `"}}]}`
		before := snapshot(t, su, "Patient", pat).vid
		r := bounded(t, limit, func() *response {
			return do(t, "POST", "fhir/R4", admin, "application/fhir+json", []byte(bundle))
		})
		expect(t, r, 200)
		if !strings.Contains(string(r.body), `"status":"413 Request Entity Too Large"`) {
			t.Fatalf("entry not refused with 413: %.300s", r.body)
		}
		if v := snapshot(t, su, "Patient", pat).vid; v != before {
			t.Fatalf("patient written: version %s", v)
		}
	})
	t.Run("membership through the admin route", func(t *testing.T) {
		r := bounded(t, limit, func() *response {
			return do(t, "PATCH", "admin/projects/"+pid+"/members/"+m["id"].(string), admin, "application/json-patch+json", []byte(doubling("/extension")))
		})
		expectOutcome(t, r, 413, "copy operations would add more than")
	})
	t.Run("too many operations", func(t *testing.T) {
		ops := strings.Repeat(`{"op":"test","path":"/id","value":1},`, 1001)
		r := do(t, "PATCH", "fhir/R4/Patient/"+pat, admin, "application/json-patch+json", []byte("["+strings.TrimSuffix(ops, ",")+"]"))
		expectOutcome(t, r, 413, "at most 1000 operations")
	})
}

// A transaction whose deadline passes part way leaves nothing behind: on
// SQLite its writes were never committed; on a store without transactions
// what it created is deleted even though its own context has ended.
func TestTransactionDeadline(t *testing.T) {
	ownStack(t, map[string]string{"PINION_REQUEST_TIMEOUT": "300ms", "PINION_MAX_BODY_BYTES": "4194304"})
	pid, su := adminProject(t, "Slow transaction")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "importer"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	// Each Patient has many names, each name several search values: far
	// more work than the deadline allows, however fast the store gets.
	var names []string
	for j := range 25 {
		names = append(names, fmt.Sprintf(`{"family":"Deadline%d","given":["Slow%d","Slower%d"]}`, j, j, j))
	}
	entries := make([]string, 999)
	for i := range entries {
		entries[i] = `{"request":{"method":"POST","url":"Patient"},"resource":{"resourceType":"Patient","name":[` + strings.Join(names, ",") + `],` +
			`"text":{"status":"generated","div":"<div xmlns=\"http://www.w3.org/1999/xhtml\">` + strings.Repeat("slow ", 140) + `</div>"}}}`
	}
	bundle := `{"resourceType":"Bundle","type":"transaction","entry":[` + strings.Join(entries, ",") + `]}`
	start := time.Now()
	r = do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(bundle))
	t.Logf("transaction answered %d after %v", r.status, time.Since(start).Round(time.Millisecond))
	if r.status != 504 {
		t.Fatalf("status %d, want 504 (the transaction was meant to outlive its deadline)", r.status)
	}
	// The undo runs after the deadline: wait for it to leave nothing.
	left := -1
	if !waitUntil(30*time.Second, func() bool { left = count(t, su, "Patient", pid); return left == 0 }) {
		t.Fatalf("%d of the transaction's creates were left behind", left)
	}
}

// bigPatient is a Patient of about n bytes (its text narrative).
func bigPatient(family string, n int) []byte {
	return mustJSON(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"family": family}},
		"text": map[string]any{"status": "generated", "div": `<div xmlns="http://www.w3.org/1999/xhtml">` + strings.Repeat("x", n) + `</div>`}})
}

// Answers that would not fit on the bus are bounded where they are
// assembled, and a caller never waits for a deadline because of one.
func TestOversizedAnswers(t *testing.T) {
	pid, su := adminProject(t, "Large answers")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "reader"}))
	expect(t, r, 201)
	tok := clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	// The test stack's bus carries 1 MiB + the 64 KiB body limit.
	var ids []string
	for i := 0; i < 24; i++ {
		r := do(t, "POST", "fhir/R4/Patient", tok, "application/fhir+json", bigPatient("Large", 60000))
		expect(t, r, 201)
		ids = append(ids, r.json(t)["id"].(string))
	}

	t.Run("batch of reads", func(t *testing.T) {
		var entries []string
		for _, id := range ids {
			entries = append(entries, `{"request":{"method":"GET","url":"Patient/`+id+`"}}`)
		}
		start := time.Now()
		r := do(t, "POST", "fhir/R4", tok, "application/fhir+json", []byte(`{"resourceType":"Bundle","type":"batch","entry":[`+strings.Join(entries, ",")+`]}`))
		t.Logf("answered %d in %v, %d bytes", r.status, time.Since(start).Round(time.Millisecond), len(r.body))
		expect(t, r, 200)
		ok, refused := 0, 0
		for _, e := range r.json(t)["entry"].([]any) {
			switch e.(map[string]any)["response"].(map[string]any)["status"] {
			case "200 OK":
				ok++
			case "413 Request Entity Too Large":
				refused++
			}
		}
		if ok == 0 || refused == 0 || ok+refused != len(ids) {
			t.Fatalf("%d read, %d refused of %d", ok, refused, len(ids))
		}
	})
	t.Run("search page", func(t *testing.T) {
		seen := map[string]bool{}
		next := "fhir/R4/Patient?name=Large&_count=24"
		pages := 0
		for next != "" && pages < 10 {
			r := do(t, "GET", next, tok, "", nil)
			expect(t, r, 200)
			pages++
			b := r.json(t)
			entries, _ := b["entry"].([]any)
			for _, e := range entries {
				seen[e.(map[string]any)["resource"].(map[string]any)["id"].(string)] = true
			}
			next = ""
			for _, l := range b["link"].([]any) {
				if l.(map[string]any)["relation"] == "next" {
					u := l.(map[string]any)["url"].(string)
					next = u[strings.Index(u, "fhir/R4/"):]
				}
			}
		}
		if pages < 2 || len(seen) != len(ids) {
			t.Fatalf("%d pages gave %d of %d patients", pages, len(seen), len(ids))
		}
	})
	t.Run("history", func(t *testing.T) {
		id := ids[0]
		for i := 0; i < 20; i++ {
			body := bigPatient("Large", 60000+i)
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			m["id"] = id
			expect(t, do(t, "PUT", "fhir/R4/Patient/"+id, tok, "application/fhir+json", mustJSON(m)), 200)
		}
		start := time.Now()
		r := do(t, "GET", "fhir/R4/Patient/"+id+"/_history", tok, "", nil)
		expectOutcome(t, r, 413, "too large to answer at once")
		if time.Since(start) > 5*time.Second {
			t.Fatalf("took %v", time.Since(start))
		}
	})
}

// A raw upload near the body limit is stored once and answered at once:
// the answer does not repeat the content (which, base64-encoded, would be
// too large for the bus and leave the uploader waiting, then retrying).
func TestLargeBinaryUpload(t *testing.T) {
	ownStack(t, map[string]string{"PINION_MAX_BODY_BYTES": "8388608", "PINION_REQUEST_TIMEOUT": "5s"})
	_, tok := project(t, "large upload")
	content := bytes.Repeat([]byte("0123456789abcdef"), 7_500_000/16)
	start := time.Now()
	r := do(t, "POST", "fhir/R4/Binary", tok, "application/octet-stream", content)
	t.Logf("answered %d in %v", r.status, time.Since(start).Round(time.Millisecond))
	expect(t, r, 201)
	b := r.json(t)
	if _, ok := b["data"]; ok || b["contentType"] != "application/octet-stream" {
		t.Fatalf("answer: %.300s", r.body)
	}
	r = do(t, "GET", "fhir/R4/Binary/"+b["id"].(string), tok, "", nil, "Accept", "*/*")
	expect(t, r, 200)
	if !bytes.Equal(r.body, content) {
		t.Fatalf("downloaded %d bytes, uploaded %d", len(r.body), len(content))
	}
	r = do(t, "GET", "fhir/R4/Binary?_summary=count", tok, "", nil)
	expect(t, r, 200)
	if n := r.json(t)["total"].(float64); n != 1 {
		t.Fatalf("%v Binaries stored", n)
	}
}

// An HL7 message whose delimiters would each become an element is refused
// before it is parsed into memory (before: a megabyte of '|' became some
// 360 MB on its way to the bot); a large realistic message still runs.
func TestHL7Amplification(t *testing.T) {
	parallelIn(t, ownStacks)
	parallelStack(t, map[string]string{"PINION_MAX_BODY_BYTES": "8388608"})
	pid, su := adminProject(t, "HL7 bombs")
	echo := newBot(t, su, pid, "hl7 echo", "", `exports.handler = async (medplum, event) => event.input.getSegment('MSH').getField(9).toString();`, "echo.js")
	const hdr = "MSH|^~\\&|A|B|C|D|20240101||ADT^A01|1|P|2.5\r"
	hostile := map[string]string{
		"fields":      hdr + "PID" + strings.Repeat("|", 1<<20),
		"repetitions": hdr + "PID|" + strings.Repeat("~", 1<<20),
		"components":  hdr + "PID|" + strings.Repeat("^", 1<<20),
		"segments":    hdr + strings.Repeat("NTE|\r", 1<<18),
	}
	for name, msg := range hostile {
		t.Run(name, func(t *testing.T) {
			r := bounded(t, 100<<20, func() *response {
				return do(t, "POST", "fhir/R4/Bot/"+echo+"/$execute", su, "x-application/hl7-v2+er7", []byte(msg))
			})
			expectOutcome(t, r, 413, "HL7 message too large")
		})
	}
	t.Run("three at once", func(t *testing.T) {
		msg := hdr + "PID" + strings.Repeat("|", 3<<20)
		stop := rss.Watch(nil)
		var wg sync.WaitGroup
		statuses := make([]int, 3)
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = do(t, "POST", "fhir/R4/Bot/"+echo+"/$execute", su, "x-application/hl7-v2+er7", []byte(msg)).status
			}()
		}
		wg.Wait()
		grew := stop()
		t.Logf("statuses %v, resident memory grew %d MiB", statuses, grew>>20)
		if grew > 150<<20 || statuses[0] != 413 || statuses[1] != 413 || statuses[2] != 413 {
			t.Fatalf("statuses %v, grew %d MiB", statuses, grew>>20)
		}
	})
	t.Run("realistic", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(hdr + "PID|1||123^^^H^MR||DOE^JOHN\r")
		for i := 0; i < 2000; i++ {
			fmt.Fprintf(&b, "OBX|%d|NM|2345-7^Glucose^LN||%d|mg/dL|70-99|N|||F\r", i+1, 80+i%40)
		}
		r := do(t, "POST", "fhir/R4/Bot/"+echo+"/$execute", su, "x-application/hl7-v2+er7", []byte(b.String()))
		expect(t, r, 200)
		if !strings.Contains(string(r.body), "ADT^A01") {
			t.Fatalf("answer %q", r.body)
		}
	})
}
