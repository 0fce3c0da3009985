package bus

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The plain scan of route parameters reads what encoding/json reads, and
// hands anything it does not know to encoding/json.
func TestDecodeParamsAsJSON(t *testing.T) {
	for _, s := range []string{
		`{"id":"123","type":"Patient"}`,
		`{}`,
		`{"id":""}`,
		`{"a:b":"c,d}"}`,
		`{"id":"a\"b"}`,
		`{"id":"\u003cx\u003e"}`,
		`{"id":"é"}`,
		"{\"id\":\"\xff\"}",
		"{\"id\":\"a\tb\"}",
		`{"id":1}`,
		`{"id":"1",}`,
		`{"id":"1","id":"2"}`,
		`{"id" : "1"}`,
		`{"id"}`,
		`{"id":"1"`,
		`null`,
		`{"id":"1"}x`,
		``,
	} {
		t.Run(s, func(t *testing.T) { sameAsJSON(t, s) })
	}
}

func FuzzDecodeParams(f *testing.F) {
	for _, s := range []string{`{"id":"123","type":"Patient"}`, `{}`, `{"a":"\u0026"}`, `{"a":"b","c":"d"}`} {
		f.Add(s)
	}
	f.Fuzz(sameAsJSON)
}

func sameAsJSON(t *testing.T, s string) {
	var want map[string]string
	wantErr := json.Unmarshal([]byte(s), &want)
	got, err := decodeParams(s)
	if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%q: %#v %v, encoding/json reads %#v %v", s, got, err, want, wantErr)
	}
}

// A FHIR read's request decodes without encoding/json's allocations: the
// parameters by a plain scan, the principal from those already decoded.
// Each request still gets a principal of its own.
func TestDecodeRequestAllocations(t *testing.T) {
	p := &Principal{LoginID: "l1", User: "User/u1", Profile: "Practitioner/p1", Project: "p1", Membership: "m1", Scope: "openid", AccessPolicy: true}
	m := EncodeRequest("s", &Request{Method: "GET", Path: "/fhir/R4/Patient/1", Params: map[string]string{"type": "Patient", "id": "1"}, Principal: p})
	r, err := DecodeRequest(m.Header, m.Data)
	if err != nil || !reflect.DeepEqual(r.Principal, p) || r.Params["id"] != "1" || r.Params["type"] != "Patient" {
		t.Fatalf("%+v %v", r, err)
	}
	r.Principal.Project = "changed"
	if again, _ := DecodeRequest(m.Header, m.Data); again.Principal.Project != "p1" {
		t.Fatalf("a request's change reached the next request: %+v", again.Principal)
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = DecodeRequest(m.Header, m.Data) })
	if allocs > 12 {
		t.Fatalf("%v allocations to decode a read's request, want at most 12", allocs)
	}
}

// Route parameters are written byte for byte as encoding/json writes them.
func TestEncodeParamsAsJSON(t *testing.T) {
	for _, m := range []map[string]string{
		{"type": "Patient", "id": "123"},
		{"id": ""},
		{"b": "1", "a": "2", "c": "3", "A": "4"},
		{"id": `a"b`},
		{"id": "a<b>&c"},
		{"id": "é"},
		{"id": "\xff"},
		{"id": "a\tb"},
		{"id": "\u2028"},
		{"a\\b": "c"},
	} {
		sameBytesAsJSON(t, m)
	}
}

func FuzzEncodeParams(f *testing.F) {
	f.Add("type", "Patient", "id", "123")
	f.Add("a", "<", "b", "\\")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		sameBytesAsJSON(t, map[string]string{k1: v1, k2: v2})
	})
}

func sameBytesAsJSON(t *testing.T, m map[string]string) {
	want, _ := json.Marshal(m)
	if got := encodeParams(m); got != string(want) {
		t.Fatalf("%q: %s, encoding/json writes %s", m, got, want)
	}
	sameAsJSON(t, string(want)) // and read back as encoding/json reads it
}

// A read's request is written with few allocations: the principal's
// encoding comes from those already written.
func TestEncodeRequestAllocations(t *testing.T) {
	p := &Principal{LoginID: "l1", User: "User/u1", Profile: "Practitioner/p1", Project: "p1", Membership: "m1", Scope: "openid"}
	r := &Request{Method: "GET", Path: "/fhir/R4/Patient/1", Params: map[string]string{"type": "Patient", "id": "1"}, Principal: p}
	want, _ := json.Marshal(p)
	if got := EncodeRequest("s", r).Header.Get(hPrincipal); got != string(want) {
		t.Fatalf("principal %s, want %s", got, want)
	}
	allocs := testing.AllocsPerRun(100, func() { _ = EncodeRequest("s", r) })
	if allocs > 10 {
		t.Fatalf("%v allocations to encode a read's request, want at most 10", allocs)
	}
}
