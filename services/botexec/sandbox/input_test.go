package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// describeInput answers what event.input looked like to the bot: its type
// and its value.
const describeInput = `exports.handler = async (m, e) => ({
	type: e.input === null ? 'null' : Array.isArray(e.input) ? 'array' : e.input instanceof Hl7Message ? 'hl7' : typeof e.input,
	value: e.input instanceof Hl7Message ? e.input.toString() : e.input,
});`

func TestInputValues(t *testing.T) {
	type payload struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	tests := []struct {
		name  string
		input any
		want  string
	}{
		{"string", "x", `{"type":"string","value":"x"}`},
		{"nil is null", nil, `{"type":"null","value":null}`},
		{"a nil map is undefined", map[string]any(nil), `{"type":"undefined"}`},
		{"json.Number", json.Number("12.5"), `{"type":"number","value":12.5}`},
		{"int", 7, `{"type":"number","value":7}`},
		{"int64", int64(-3), `{"type":"number","value":-3}`},
		{"uint32", uint32(9), `{"type":"number","value":9}`},
		{"float32", float32(1.5), `{"type":"number","value":1.5}`},
		{"bool", false, `{"type":"boolean","value":false}`},
		{"strings", []string{"a", "b"}, `{"type":"array","value":["a","b"]}`},
		{"nested", map[string]any{"z": []any{json.Number("1"), nil, map[string]any{"q": true}}, "a": "x"}, `{"type":"object","value":{"a":"x","z":[1,null,{"q":true}]}}`},
		{"form", map[string]string{"b": "2", "a": "1"}, `{"type":"object","value":{"a":"1","b":"2"}}`},
		{"raw JSON array", json.RawMessage(`[3,"x",{"k":null}]`), `{"type":"array","value":[3,"x",{"k":null}]}`},
		{"other Go values travel as their JSON", payload{A: 1}, `{"type":"object","value":{"a":1}}`},
		{"pointer to a struct", &payload{A: 2, B: "y"}, `{"type":"object","value":{"a":2,"b":"y"}}`},
	}
	p := mustCompile(t, describeInput)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), p, Event{Input: tt.input}, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			mustSucceed(t, res)
			if string(res.JSON) != tt.want {
				t.Errorf("got %s\nwant %s", res.JSON, tt.want)
			}
		})
	}
}

func TestInputErrors(t *testing.T) {
	// The handler logs first, so a log line means it ran.
	p := mustCompile(t, `exports.handler = async (m, e) => { console.log('ran'); return e.input };`)
	tests := []struct {
		name string
		ev   Event
		want string // exact message; "" for any
	}{
		{"malformed json.Number", Event{Input: json.Number("x")}, `event.input: strconv.ParseFloat: parsing "x": invalid syntax`},
		{"a secret JSON cannot carry", Event{Secrets: map[string]any{"k": make(chan int)}}, "event.secrets: json: unsupported type: chan int"},
		{"malformed raw JSON", Event{Input: json.RawMessage(`{"a":`)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), p, tt.ev, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Err == nil || res.Err.Limit != "" || (tt.want != "" && res.Err.Message != tt.want) {
				t.Fatalf("err = %+v, want %q", res.Err, tt.want)
			}
			if res.Log != "" {
				t.Errorf("the handler ran: log %q", res.Log)
			}
		})
	}
}

func TestHL7InputKinds(t *testing.T) {
	p := mustCompile(t, describeInput)
	tests := []struct {
		name        string
		input       any
		contentType string
		wantType    string
	}{
		{"bytes", []byte(adt), HL7ContentType, "hl7"},
		{"content type in capitals, spaced", adt, " X-Application/HL7-V2+ER7 ; charset=utf-8", "hl7"},
		{"a similar content type is text", adt, HL7ContentType + "x", "string"},
		{"parsed message whatever the content type", mustParseHL7(adt), "text/plain", "hl7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), p, Event{Input: tt.input, ContentType: tt.contentType}, nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			mustSucceed(t, res)
			var got struct{ Type, Value string }
			if err := json.Unmarshal(res.JSON, &got); err != nil {
				t.Fatalf("%v: %s", err, res.JSON)
			}
			if got.Type != tt.wantType || got.Value != adt {
				t.Errorf("got %s %q, want %s %q", got.Type, got.Value, tt.wantType, adt)
			}
		})
	}
}

func TestHL7InputRefused(t *testing.T) {
	tests := []struct {
		name    string
		input   any
		status  int
		message string
	}{
		{"not text", 42.0, 400, "HL7 input must be text, not float64"},
		{"JSON", json.RawMessage(`{}`), 400, "HL7 input must be text, not json.RawMessage"},
		{"not a message", "PID|1", 400, "hl7: segment 1, column 1 (offset 0): message must start with an MSH segment"},
		{"over the size limit", "MSH|^~\\&|" + strings.Repeat("x", 8<<20), 413, "hl7: more than 8388608 bytes"},
	}
	p := mustCompile(t, echoBot)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), p, Event{Input: tt.input, ContentType: HL7ContentType}, nil, Limits{})
			var fe *fhir.Error
			if res != nil || !errors.As(err, &fe) {
				t.Fatalf("Run = %+v, %v; want a *fhir.Error", res, err)
			}
			if fe.Status != tt.status || fe.Message() != tt.message {
				t.Errorf("got %d %q, want %d %q", fe.Status, fe.Message(), tt.status, tt.message)
			}
		})
	}
}

func TestEventDefaults(t *testing.T) {
	// Secrets and headers are always objects; contentType and traceId are
	// there only when given; a missing bot reference is undefined.
	res := runBot(t, `exports.handler = async (m, e) => [Object.keys(e).sort().join(), JSON.stringify(e.secrets), JSON.stringify(e.headers), typeof e.bot, 'contentType' in e, 'traceId' in e].join(' ');`, Event{Input: "x"}, nil, Limits{})
	mustSucceed(t, res)
	if want := "bot,headers,input,requester,secrets {} {} undefined false false"; res.Text != want {
		t.Errorf("got  %q\nwant %q", res.Text, want)
	}
}

func TestSecretsAreCopies(t *testing.T) {
	secrets := map[string]any{"API_KEY": map[string]any{"name": "API_KEY", "valueString": "s3cret"}}
	headers := map[string]string{"x-a": "1"}
	p := mustCompile(t, `exports.handler = async (m, e) => {
		const seen = e.secrets.API_KEY.valueString + e.headers['x-a'];
		e.secrets.API_KEY.valueString = 'changed'; delete e.secrets.API_KEY; e.secrets.NEW = 1; e.headers['x-a'] = '2';
		return seen;
	};`)
	for round := 0; round < 2; round++ {
		res, err := Run(context.Background(), p, Event{Secrets: secrets, Headers: headers}, nil, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, res)
		if res.Text != "s3cret1" {
			t.Errorf("round %d: the bot saw %q", round, res.Text)
		}
	}
	b, _ := json.Marshal([]any{secrets, headers})
	if string(b) != `[{"API_KEY":{"name":"API_KEY","valueString":"s3cret"}},{"x-a":"1"}]` {
		t.Errorf("the host's maps changed: %s", b)
	}
}

func TestContentTypeAsGiven(t *testing.T) {
	res := runBot(t, `exports.handler = async (m, e) => e.contentType;`, Event{Input: "x", ContentType: "text/plain; charset=UTF-8"}, nil, Limits{})
	mustSucceed(t, res)
	if res.Text != "text/plain; charset=UTF-8" {
		t.Errorf("contentType = %q", res.Text)
	}
}
