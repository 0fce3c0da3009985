package sandbox

import (
	"testing"
	"time"
)

func TestResultEdgeKinds(t *testing.T) {
	tests := []struct {
		name string
		ret  string
		kind Kind
		text string
		json string
		rt   string
	}{
		{"toJSON answering undefined", `({toJSON() { return undefined }})`, KindUndefined, "", "", ""},
		{"a Map has no JSON fields", `new Map([['a', 1]])`, KindJSON, "", `{}`, ""},
		{"a Date is its JSON string", `new Date(0)`, KindJSON, "", `"1970-01-01T00:00:00.000Z"`, ""},
		{"a resourceType that is not a string", `({resourceType: 5})`, KindJSON, "", `{"resourceType":5}`, ""},
		{"an empty resourceType", `({resourceType: ''})`, KindJSON, "", `{"resourceType":""}`, ""},
		{"an inherited resourceType", `Object.create({resourceType: 'Patient'})`, KindResource, "", `{}`, "Patient"},
		{"Infinity", `Infinity`, KindNumber, "Infinity", "null", ""},
		{"negative zero", `-0`, KindNumber, "0", "0", ""},
		{"a bigint past float64", `2n ** 70n`, KindNumber, "1180591620717411303424", "1180591620717411303424", ""},
		{"an Hl7Message built by the bot", `new Hl7Message([new Hl7Segment(['MSH', '^~\\&', 'A']), new Hl7Segment(['PID', '1'])])`, KindHL7, "MSH|^~\\&|A\rPID|1", "", ""},
		{"a boxed string is JSON", `new String('s')`, KindJSON, "", `"s"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => `+tt.ret+`;`, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Kind != tt.kind || res.Text != tt.text || string(res.JSON) != tt.json || res.ResourceType != tt.rt {
				t.Errorf("got %v %q %s %q; want %v %q %s %q", res.Kind, res.Text, res.JSON, res.ResourceType, tt.kind, tt.text, tt.json, tt.rt)
			}
		})
	}
}

func TestOutputLimit(t *testing.T) {
	tests := []struct {
		name    string
		ret     string
		max     int
		wantErr string // "" when it fits
	}{
		{"string at the limit", `'x'.repeat(1000)`, 1000, ""},
		{"string over it", `'x'.repeat(1001)`, 1000, "Bot output of 1001 bytes exceeds the limit of 1000 bytes"},
		{"counted in UTF-8 bytes", `'é'.repeat(600)`, 1000, "Bot output of 1200 bytes exceeds the limit of 1000 bytes"},
		{"JSON is measured serialised", `({a: 'x'.repeat(1000)})`, 1000, "Bot output of 1008 bytes exceeds the limit of 1000 bytes"},
		{"number", `12345`, 4, "Bot output of 5 bytes exceeds the limit of 4 bytes"},
		{"boolean", `false`, 4, "Bot output of 5 bytes exceeds the limit of 4 bytes"},
		{"HL7", `Hl7Message.parse('MSH|^~\\&|' + 'x'.repeat(100))`, 100, "Bot output of 109 bytes exceeds the limit of 100 bytes"},
		{"null always fits", `null`, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => `+tt.ret+`;`, Event{}, nil, Limits{MaxOutputBytes: tt.max})
			if tt.wantErr == "" {
				mustSucceed(t, res)
				return
			}
			if res.Err == nil || res.Err.Limit != LimitOutput || res.Err.Message != tt.wantErr {
				t.Fatalf("err = %+v, want %q", res.Err, tt.wantErr)
			}
			if res.Kind != KindUndefined || res.Text != "" || res.JSON != nil {
				t.Errorf("a failed run carries a value: %v %q %s", res.Kind, res.Text, res.JSON)
			}
		})
	}
}

func TestUnserialisableResults(t *testing.T) {
	tests := []struct {
		name string
		ret  string
		want string // exact message; "" for any (the runtime's own wording)
	}{
		{"a cycle", `(() => { const a = {}; a.a = a; return a })()`, ""},
		{"a bigint inside an object", `({n: 1n})`, ""},
		{"toJSON that throws", `({toJSON() { throw new Error('no JSON for you') }})`, "no JSON for you"},
		{"a getter that throws", `({get a() { throw new Error('getter boom') }})`, "getter boom"},
		{"nested past the serialisation depth", `(() => { let o = {}; for (let i = 0; i < 300; i++) o = {o}; return o })()`, "Object nested too deeply to serialize (over 200 levels)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// MaxCallDepth 500 sets the serialisation depth to 500/2-50.
			res := runBot(t, `exports.handler = async () => `+tt.ret+`;`, Event{}, nil, Limits{MaxCallDepth: 500})
			if res.Err == nil || res.Err.Limit != "" || (tt.want != "" && res.Err.Message != tt.want) {
				t.Fatalf("err = %+v, want the bot's failure %q", res.Err, tt.want)
			}
			if res.Err.Message == "" {
				t.Error("no message")
			}
		})
	}
}

func TestThrownValues(t *testing.T) {
	oo := `{resourceType: 'OperationOutcome', id: 'forbidden', issue: [{severity: 'error', code: 'forbidden', details: {text: 'No way'}}]}`
	tests := []struct {
		name      string
		body      string
		message   string
		outcomeID string // "-" for none
	}{
		{"null", `throw null`, "Unknown error", "-"},
		{"undefined", `throw undefined`, "Unknown error", "-"},
		{"a number", `throw 42`, "42", "-"},
		{"an outcome itself", `throw ` + oo, "No way", "-"},
		{"an object carrying an outcome", `throw {outcome: ` + oo + `}`, "No way", "forbidden"},
		{"an Error carrying an outcome", `throw Object.assign(new Error('plain'), {outcome: ` + oo + `})`, "plain", "forbidden"},
		{"an Error carrying something else", `throw Object.assign(new Error('plain'), {outcome: {id: 'x'}})`, "plain", "-"},
		{"an object with a message", `throw {message: 'shaped like an error'}`, "shaped like an error", "-"},
		{"issues joined", `throw new OperationOutcomeError({resourceType: 'OperationOutcome', issue: [{severity: 'error', code: 'invalid', diagnostics: 'first'}, {severity: 'error', code: 'invalid'}]})`, "first; Unknown error", ""},
		{"no issues", `throw new OperationOutcomeError({resourceType: 'OperationOutcome', issue: []})`, "Unknown error", ""},
		{"rejected after a wait", `await new Promise(r => setTimeout(r, 1)); throw new TypeError('later')`, "later", "-"},
		{"a rejected thenable", `return {then(_, reject) { reject(new Error('thenable said no')) }}`, "thenable said no", "-"},
		{"a thenable that throws", `return {then() { throw new Error('then threw') }}`, "then threw", "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => { `+tt.body+` };`, Event{}, nil, Limits{})
			if res.Err == nil {
				t.Fatalf("succeeded: %v %s", res.Kind, res.JSON)
			}
			if res.Err.Message != tt.message || res.Err.Limit != "" {
				t.Errorf("message %q (limit %q), want %q", res.Err.Message, res.Err.Limit, tt.message)
			}
			switch {
			case tt.outcomeID == "-" && res.Err.Outcome != nil:
				t.Errorf("unexpected outcome %+v", res.Err.Outcome)
			case tt.outcomeID != "-" && (res.Err.Outcome == nil || res.Err.Outcome.ID != tt.outcomeID):
				t.Errorf("outcome %+v, want id %q", res.Err.Outcome, tt.outcomeID)
			}
		})
	}
}

func TestHandlerMissing(t *testing.T) {
	const want = "Bot code does not export a handler function (exports.handler)"
	for name, code := range map[string]string{
		"no exports":          ``,
		"a string":            `exports.handler = 'handler';`,
		"module.exports null": `module.exports = null;`,
		"a default export":    `exports.default = async () => 1;`,
	} {
		t.Run(name, func(t *testing.T) {
			res := runBot(t, code, Event{}, nil, Limits{})
			if res.Err == nil || res.Err.Message != want || res.Err.Limit != "" {
				t.Errorf("err = %+v", res.Err)
			}
		})
	}
}

func TestTimeoutMessage(t *testing.T) {
	// A timer clamped to the deadline never fires before the run times out.
	res := runBot(t, `exports.handler = () => new Promise(r => setTimeout(() => r('fired'), 1e12));`, Event{}, nil, Limits{Timeout: 30 * time.Millisecond})
	if res.Err == nil || res.Err.Limit != LimitTimeout || res.Err.Message != "Bot timed out after 30 ms" {
		t.Fatalf("err = %+v", res.Err)
	}
	if res.Elapsed < 30*time.Millisecond {
		t.Errorf("stopped after %v, before its deadline", res.Elapsed)
	}
	// A timer due just before the deadline does fire.
	res = runBot(t, `exports.handler = () => new Promise(r => setTimeout(() => r('fired'), 5));`, Event{}, nil, Limits{Timeout: time.Second})
	mustSucceed(t, res)
	if res.Text != "fired" {
		t.Errorf("got %q", res.Text)
	}
}

func TestCallDepthMessage(t *testing.T) {
	res := runBot(t, `function f() { return f() } exports.handler = async () => f();`, Event{}, nil, Limits{MaxCallDepth: 300})
	if res.Err == nil || res.Err.Limit != LimitCallDepth || res.Err.Message != "Maximum call stack size exceeded (300 frames)" {
		t.Fatalf("err = %+v", res.Err)
	}
	// The limit ends the run: the bot cannot catch it and carry on.
	res = runBot(t, `function f() { return f() } exports.handler = async () => { try { f() } catch (e) { return 'caught ' + e.name } };`, Event{}, nil, Limits{MaxCallDepth: 300})
	if res.Err == nil || res.Err.Limit != LimitCallDepth || res.Err.Message != "Maximum call stack size exceeded (300 frames)" {
		t.Fatalf("caught: %v %q, err = %+v", res.Kind, res.Text, res.Err)
	}
}
