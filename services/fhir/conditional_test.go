package fhirsvc

import (
	"encoding/json"
	"runtime"
	"sync"
	"testing"

	"github.com/pinion-health/pinion/pkg/repo"
)

func TestConditionQuery(t *testing.T) {
	cases := []struct {
		name, cond string
		// param and value are one parameter the search keeps; or status,
		// text and expr the refusal.
		param, value string
		status       int
		text, expr   string
	}{
		{name: "a condition", cond: "identifier=http://x|1", param: "identifier", value: "http://x|1"},
		{name: "with a leading ?", cond: "?identifier=http://x|1", param: "identifier", value: "http://x|1"},
		{name: "escaped", cond: "identifier=http%3A%2F%2Fx%7C1", param: "identifier", value: "http://x|1"},
		{name: "several parameters", cond: "family=Smith&gender=male", param: "gender", value: "male"},
		{name: "a count asked is not used", cond: "gender=male&_count=50", param: "_count", value: "2"},
		{name: "a bad count is not used either", cond: "gender=male&_count=lots", param: "_count", value: "2"},

		{name: "empty", cond: "", status: 400, text: "A conditional operation needs search parameters"},
		{name: "only ?", cond: "?", status: 400, text: "A conditional operation needs search parameters"},
		{name: "only &", cond: "&&", status: 400, text: "A conditional operation needs search parameters"},
		{name: "bad escape", cond: "identifier=%zz", status: 400, text: `Invalid condition: invalid URL escape "%zz"`, expr: "If-None-Exist"},
		{name: "semicolon", cond: "family=a;gender=male", status: 400, text: "Invalid condition: invalid semicolon separator in query", expr: "If-None-Exist"},
		{name: "unknown parameter", cond: "nonsense=1", status: 400, text: "Unknown search parameter: nonsense", expr: "nonsense"},
		{name: "empty value", cond: "family=", status: 400, text: "Empty value in search parameter family", expr: "family"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := conditionQuery("Patient", tc.cond)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, tc.expr)
				return
			}
			wantNoError(t, err)
			// Two are enough to tell one match from several.
			if q.Count != 2 || q.Offset != 0 {
				t.Fatalf("count %d offset %d, want 2 and 0", q.Count, q.Offset)
			}
			if got := q.Canonical.Get(tc.param); got != tc.value {
				t.Fatalf("%s = %q, want %q (%v)", tc.param, got, tc.value, q.Canonical)
			}
			if len(q.Filter) == 0 {
				t.Fatal("a condition that filters nothing")
			}
		})
	}
}

func TestOneMatch(t *testing.T) {
	a := &repo.Resource{Type: "Patient", ID: "a"}
	b := &repo.Resource{Type: "Patient", ID: "b"}
	if got, err := oneMatch(&repo.Page{}); got != nil || err != nil {
		t.Fatalf("no match: %v %v", got, err)
	}
	if got, err := oneMatch(&repo.Page{Resources: []*repo.Resource{a}, More: false}); got != a || err != nil {
		t.Fatalf("one match: %v %v", got, err)
	}
	for _, list := range [][]*repo.Resource{{a, b}, {a, b, a}} {
		got, err := oneMatch(&repo.Page{Resources: list})
		if got != nil {
			t.Fatalf("several matches answered %v", got)
		}
		wantError(t, err, 412, "Multiple resources found matching condition", "")
	}
}

func TestBindCondition(t *testing.T) {
	found := &repo.Resource{Type: "Patient", ID: "p1"}
	cases := []struct {
		name, body string
		found      *repo.Resource
		// want is the resource to write; or status and text the refusal.
		want   string
		status int
		text   string
	}{
		{name: "nothing found, the server names it", body: `{"resourceType":"Patient","id":"mine"}`, want: `{"resourceType":"Patient"}`},
		{name: "nothing found, no id", body: `{"resourceType":"Patient"}`, want: `{"resourceType":"Patient"}`},
		{name: "found, no id", body: `{"resourceType":"Patient"}`, found: found, want: `{"resourceType":"Patient","id":"p1"}`},
		{name: "found, same id", body: `{"resourceType":"Patient","id":"p1"}`, found: found, want: `{"resourceType":"Patient","id":"p1"}`},
		{name: "found, id not a string", body: `{"resourceType":"Patient","id":7}`, found: found, want: `{"resourceType":"Patient","id":"p1"}`},
		{name: "found, another id", body: `{"resourceType":"Patient","id":"p2"}`, found: found, status: 400, text: "Resource id does not match the resource the condition found"},
		{name: "found, empty id", body: `{"resourceType":"Patient","id":""}`, found: found, status: 400, text: "Resource id does not match the resource the condition found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res map[string]any
			if err := json.Unmarshal([]byte(tc.body), &res); err != nil {
				t.Fatal(err)
			}
			err := bindCondition(res, tc.found)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text, "id")
				return
			}
			wantNoError(t, err)
			sameJSON(t, res, tc.want)
		})
	}
}

func TestConditionKey(t *testing.T) {
	if got := conditionKey("p1", "Patient", "identifier=x"); got != "p1|Patient|identifier=x" {
		t.Fatalf("key %q", got)
	}
	// One condition in two projects, or on two types, are two locks.
	keys := map[string]bool{
		conditionKey("p1", "Patient", "identifier=x"):      true,
		conditionKey("p2", "Patient", "identifier=x"):      true,
		conditionKey("p1", "Practitioner", "identifier=x"): true,
		conditionKey("p1", "Patient", "identifier=y"):      true,
	}
	if len(keys) != 4 {
		t.Fatalf("keys collide: %v", keys)
	}
}

// held counts the callers holding or waiting for key's lock (0: no entry).
func held(k *keyLocks, key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.locks[key]; l != nil {
		return l.users
	}
	return 0
}

func TestKeyLocksLeaveNothingBehind(t *testing.T) {
	var k keyLocks // the zero value is ready
	unlock := k.lock("a")
	if held(&k, "a") != 1 || len(k.locks) != 1 {
		t.Fatalf("locked: %d users, %d keys", held(&k, "a"), len(k.locks))
	}
	unlock()
	if len(k.locks) != 0 {
		t.Fatalf("%d keys left after unlock", len(k.locks))
	}
	// Again, and two keys at once: neither waits for the other.
	ua := k.lock("a")
	ub := k.lock("b")
	if len(k.locks) != 2 {
		t.Fatalf("%d keys, want 2", len(k.locks))
	}
	ub()
	if held(&k, "b") != 0 || held(&k, "a") != 1 {
		t.Fatal("unlocking b touched a")
	}
	ua()
	if len(k.locks) != 0 {
		t.Fatalf("%d keys left after unlock", len(k.locks))
	}
}

func TestKeyLocksSerialiseOneKey(t *testing.T) {
	var k keyLocks
	unlock := k.lock("cond")
	acquired := make(chan func())
	go func() { acquired <- k.lock("cond") }()
	// Wait until the second caller is waiting on the lock.
	for held(&k, "cond") != 2 {
		runtime.Gosched()
	}
	select {
	case <-acquired:
		t.Fatal("a second caller got a held lock")
	default:
	}
	// Another key is free meanwhile.
	k.lock("other")()
	unlock()
	second := <-acquired
	if held(&k, "cond") != 1 {
		t.Fatalf("%d users after the first left", held(&k, "cond"))
	}
	second()
	if len(k.locks) != 0 {
		t.Fatalf("%d keys left", len(k.locks))
	}
}

func TestKeyLocksManyCallers(t *testing.T) {
	var k keyLocks
	var wg sync.WaitGroup
	var x, y int // each written only under its key's lock
	counts := map[string]*int{"x": &x, "y": &y}
	const callers = 64
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"x", "y"}[i%2]
			defer k.lock(key)()
			n := *counts[key]
			runtime.Gosched() // invite another caller in, were the lock to let one
			*counts[key] = n + 1
		}()
	}
	wg.Wait()
	if x != callers/2 || y != callers/2 {
		t.Fatalf("counts %d and %d, want %d each: a lock let two callers in", x, y, callers/2)
	}
	if len(k.locks) != 0 {
		t.Fatalf("%d keys left after every caller", len(k.locks))
	}
}
