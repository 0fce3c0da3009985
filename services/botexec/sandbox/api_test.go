package sandbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestKindString(t *testing.T) {
	tests := []struct {
		kind Kind
		want string
	}{
		{KindUndefined, "undefined"},
		{KindNull, "null"},
		{KindString, "string"},
		{KindNumber, "number"},
		{KindBoolean, "boolean"},
		{KindJSON, "json"},
		{KindResource, "resource"},
		{KindHL7, "hl7"},
		{Kind(8), "Kind(8)"},
		{Kind(-1), "Kind(-1)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.kind.String(); got != tt.want {
				t.Errorf("Kind(%d).String() = %q, want %q", int(tt.kind), got, tt.want)
			}
		})
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Limits
		want Limits
	}{
		{"zero takes every default", Limits{}, DefaultLimits},
		{"negative takes the default", Limits{Timeout: -1, MemoryBytes: -1, MaxOutputBytes: -1, MaxLogBytes: -1, MaxCallDepth: -1}, DefaultLimits},
		{"each field set is kept",
			Limits{Timeout: time.Second, MemoryBytes: 1 << 20, MaxOutputBytes: 10, MaxLogBytes: 20, MaxCallDepth: 30},
			Limits{Timeout: time.Second, MemoryBytes: 1 << 20, MaxOutputBytes: 10, MaxLogBytes: 20, MaxCallDepth: 30}},
		{"one field set, the rest default", Limits{MaxOutputBytes: 5},
			Limits{Timeout: DefaultLimits.Timeout, MemoryBytes: DefaultLimits.MemoryBytes, MaxOutputBytes: 5, MaxLogBytes: DefaultLimits.MaxLogBytes, MaxCallDepth: DefaultLimits.MaxCallDepth}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.withDefaults(); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBotErrorOutcome(t *testing.T) {
	e := &BotError{Message: "Invalid boolean", Limit: LimitOutput}
	if e.Error() != "Invalid boolean" {
		t.Errorf("Error() = %q", e.Error())
	}
	oo := e.OperationOutcome()
	if oo.ResourceType != "OperationOutcome" || len(oo.Issue) != 1 || oo.Issue[0].Code != "invalid" ||
		oo.Issue[0].Details == nil || oo.Issue[0].Details.Text != "Invalid boolean" {
		t.Errorf("outcome without one carried = %+v", oo)
	}
	res := runBot(t, `exports.handler = async () => { throw new OperationOutcomeError({resourceType: 'OperationOutcome', id: 'gone', issue: [{severity: 'error', code: 'deleted', details: {text: 'Gone'}}]}) };`, Event{}, nil, Limits{})
	if res.Err == nil || res.Err.OperationOutcome() != res.Err.Outcome || res.Err.Outcome.ID != "gone" {
		t.Errorf("an outcome the error carried is answered as is: %+v", res.Err)
	}
}

func TestResultValue(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    string // the value re-encoded, "" for nil
		wantErr string
	}{
		{"empty is nil", "", "", ""},
		{"object", `{"a":[1,"x"]}`, `{"a":[1,"x"]}`, ""},
		{"number", `1.5`, `1.5`, ""},
		{"null", `null`, `null`, ""},
		{"malformed", `{"a":`, "", "bot result: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Result{JSON: json.RawMessage(tt.json)}
			v, err := r.Value()
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if v != nil {
					t.Errorf("value = %v, want nil", v)
				}
				return
			}
			if b, _ := json.Marshal(v); string(b) != tt.want {
				t.Errorf("value = %s, want %s", b, tt.want)
			}
		})
	}
}

func TestRunRefusesNilProgram(t *testing.T) {
	for name, p := range map[string]*Program{"nil": nil, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(context.Background(), p, Event{}, nil, Limits{})
			if res != nil || err == nil || err.Error() != "sandbox: nil program" {
				t.Errorf("Run = %+v, %v", res, err)
			}
		})
	}
}

func TestProgramName(t *testing.T) {
	tests := []struct{ given, want string }{
		{"", "index.js"},
		{"Bot/123", "Bot/123"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			p, err := Compile(tt.given, `exports.handler = async () => { throw new Error('where') };`)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tt.want {
				t.Errorf("Name() = %q", p.Name())
			}
			// The name is the file name in the bot's stack traces.
			res, err := Run(context.Background(), p, Event{}, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Err == nil || !strings.Contains(res.Err.Stack, tt.want+":1:") {
				t.Errorf("stack %q does not name %s:1", res.Err.Stack, tt.want)
			}
		})
	}
}
