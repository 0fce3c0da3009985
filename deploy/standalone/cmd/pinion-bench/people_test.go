package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestPopulation checks the shares issue 39's shapes rely on, over
// 100,000 patients, and that a patient depends on its index alone.
func TestPopulation(t *testing.T) {
	const n = 100_000
	var smith, mar, mit, from1940 int
	genders := map[string]int{}
	for i := 0; i < n; i++ {
		p := patientBody(i)
		name := p["name"].([]any)[0].(map[string]any)
		family, given := name["family"].(string), name["given"].([]any)[0].(string)
		if family == "Smith" {
			smith++
		}
		if strings.HasPrefix(given, "Mar") {
			mar++
		}
		if strings.Contains(strings.ToLower(family+" "+given), "mit") {
			mit++
		}
		birth := p["birthDate"].(string)
		if birth < "1920-01-01" || birth > "2020-12-31" {
			t.Fatalf("patient %d born %s, outside 1920-2020", i, birth)
		}
		if birth >= "1940-01-01" {
			from1940++
		}
		genders[p["gender"].(string)]++
		if addr, _ := p["address"].([]any); len(addr) == 0 || addr[0].(map[string]any)["city"] == "" {
			t.Fatalf("patient %d has no city", i)
		}
	}
	share := func(k int) float64 { return float64(k) / n }
	check := func(what string, got, lo, hi float64) {
		if got < lo || got > hi {
			t.Errorf("%s: %.4f of patients, want %.3f-%.3f", what, got, lo, hi)
		}
	}
	check("Smith", share(smith), 0.008, 0.012)
	check("given Mar*", share(mar), 0.08, 0.10)
	check(`"mit" in a name`, share(mit), 0.01, 0.02)
	check("born 1940 or later", share(from1940), 0.75, 0.85)
	for _, g := range []string{"male", "female", "other", "unknown"} {
		check("gender "+g, share(genders[g]), 0.01, 0.5)
	}
	if !reflect.DeepEqual(patientBody(12345), patientBody(12345)) {
		t.Error("patientBody(12345) differs between calls")
	}
	if reflect.DeepEqual(patientBody(1)["name"], patientBody(2)["name"]) && patientBody(1)["birthDate"] == patientBody(2)["birthDate"] {
		t.Error("neighbouring patients are alike")
	}
}
