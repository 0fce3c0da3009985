package fhir

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestBundleEncode checks that Encode, which copies resources in unchecked,
// says what json.Marshal says, for every shape of entry.
func TestBundleEncode(t *testing.T) {
	total := 2
	entry := func(fullURL, res string) BundleEntry {
		e := BundleEntry{FullURL: fullURL}
		if res != "" {
			e.Resource = json.RawMessage(res)
		}
		return e
	}
	withSearch := entry("http://x/fhir/R4/Patient/1", `{"resourceType":"Patient","id":"1","name":[{"family":"<&>"}]}`)
	withSearch.Search = &struct {
		Mode string `json:"mode"`
	}{Mode: "match"}
	deleted := entry("http://x/fhir/R4/Patient/2", "")
	deleted.Request = &struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	}{Method: "DELETE", URL: "Patient/2"}
	for name, b := range map[string]Bundle{
		"empty":           {ResourceType: "Bundle", Type: "searchset"},
		"total and links": {ResourceType: "Bundle", Type: "searchset", Total: &total, Link: []BundleLink{{Relation: "self", URL: "http://x/?a=<b>"}}},
		"entries": {ResourceType: "Bundle", Type: "history", Total: &total, Entry: []BundleEntry{
			withSearch, deleted, entry("", `{"resourceType":"Patient"}`), entry("", ""),
		}},
	} {
		got, err := b.Encode()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := json.Marshal(b)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: Encode wrote invalid JSON %s: %v", name, got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n Encode  %s\n Marshal %s", name, got, want)
		}
	}
}
