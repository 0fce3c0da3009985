package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// txSize is the number of Patient creates in the tx10 op's transaction Bundle.
const txSize = 10

// sized names an op measured at a store size: name, then the clients when
// there is one, then size ("POST Patient (1 client, 1k)"), so that runs at
// two sizes, or one run before and after -grow, make lines of their own.
func sized(name string, clients int, size string) string {
	if clients == 1 {
		return name + " (1 client, " + size + ")"
	}
	return name + " (" + size + ")"
}

// storeSize writes the Patients the bench knows (seeded and grown) to two
// significant figures, as a label: 1,000 is 1k and 1,000 seeded plus
// 100,000 grown is 100k. The Patients the write ops add are not counted:
// they differ between builds, and the labels must not.
func storeSize(n int) string {
	if n < 100 {
		return kilo(n)
	}
	unit := math.Pow(10, math.Floor(math.Log10(float64(n)))-1)
	return kilo(int(math.Round(float64(n)/unit) * unit))
}

// createdBody is a Patient no search of the bench matches: the creates
// grow the store without changing what a search finds.
func createdBody() map[string]any {
	p := patientBody(0)
	p["name"] = []any{map[string]any{"given": []any{"Created"}, "family": "Bulk"}}
	return p
}

// creates measures single creates and transaction Bundles of txSize creates
// (the ops that grow the store: they come before the reads and searches).
func (b *bench) creates(size string) {
	if wanted("create") {
		body, _ := json.Marshal(createdBody())
		op := func(int, int) bool {
			st, _ := b.hc.do("POST", b.base+"fhir/R4/Patient", b.token, "application/fhir+json", body)
			return st == 201
		}
		drive(sized("POST Patient", *clients, size), *clients, op)
		drive(sized("POST Patient", 1, size), 1, op)
	}
	if wanted("tx10") {
		body := txBody()
		drive(sized(fmt.Sprintf("transaction of %d Patient creates", txSize), *clients, size), *clients, func(int, int) bool {
			return txCreated(b.hc.do("POST", b.base+"fhir/R4/", b.token, "application/fhir+json", body))
		})
	}
}

// txBody is a transaction Bundle of txSize Patient creates.
func txBody() []byte {
	entries := make([]any, txSize)
	for i := range entries {
		entries[i] = map[string]any{"resource": createdBody(), "request": map[string]any{"method": "POST", "url": "Patient"}}
	}
	body, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "transaction", "entry": entries})
	return body
}

// txCreated tells whether a transaction's answer is a 200 whose txSize
// entries each say 201 Created.
func txCreated(status int, body []byte) bool {
	if status != 200 {
		return false
	}
	var out struct {
		ResourceType string `json:"resourceType"`
		Entry        []struct {
			Response struct {
				Status string `json:"status"`
			} `json:"response"`
		} `json:"entry"`
	}
	if json.Unmarshal(body, &out) != nil || out.ResourceType != "Bundle" || len(out.Entry) != txSize {
		return false
	}
	for _, e := range out.Entry {
		if !strings.HasPrefix(e.Response.Status, "201") {
			return false
		}
	}
	return true
}

// updates measures PUTs of the known Patients, at -c clients and at one.
func (b *bench) updates(size string) {
	if !wanted("update") {
		return
	}
	op := func(w, i int) bool {
		id := b.patients[(w*131+i)%len(b.patients)]
		p := patientBody(i)
		p["id"] = id
		p["gender"] = []string{"male", "female", "other"}[i%3]
		body, _ := json.Marshal(p)
		st, _ := b.hc.do("PUT", b.base+"fhir/R4/Patient/"+id, b.token, "application/fhir+json", body)
		// Two clients may update one patient at once: both land, in turn.
		return st == 200
	}
	drive(sized("PUT Patient/<id>", *clients, size), *clients, op)
	drive(sized("PUT Patient/<id>", 1, size), 1, op)
}
