package botexec

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"
)

func TestCheckBotSettings(t *testing.T) {
	const (
		runtimeText = "Unsupported bot runtime: Pinion runs bots in its sandbox (vmcontext)"
		timeoutText = "Bot timeout must be between 1 and 900 seconds"
	)
	cases := []struct {
		name    string
		res     map[string]any
		runtime any    // runtimeVersion afterwards, when accepted
		expr    string // the refused field
		text    string
	}{
		{name: "no settings: the sandbox runtime", res: map[string]any{"name": "b"}, runtime: "vmcontext"},
		{name: "empty runtime", res: map[string]any{"runtimeVersion": ""}, runtime: "vmcontext"},
		{name: "null runtime", res: map[string]any{"runtimeVersion": nil}, runtime: "vmcontext"},
		{name: "vmcontext", res: map[string]any{"runtimeVersion": "vmcontext"}, runtime: "vmcontext"},
		{name: "awslambda kept", res: map[string]any{"runtimeVersion": "awslambda"}, runtime: "awslambda"},
		{name: "another runtime", res: map[string]any{"runtimeVersion": "fission"}, expr: "runtimeVersion", text: runtimeText},
		{name: "runtime in capitals", res: map[string]any{"runtimeVersion": "VMContext"}, expr: "runtimeVersion", text: runtimeText},
		{name: "runtime not a string", res: map[string]any{"runtimeVersion": json.Number("1")}, expr: "runtimeVersion", text: runtimeText},
		{name: "runtime checked first", res: map[string]any{"runtimeVersion": "x", "timeout": json.Number("0")}, expr: "runtimeVersion", text: runtimeText},

		{name: "shortest timeout", res: map[string]any{"timeout": json.Number("1")}, runtime: "vmcontext"},
		{name: "longest timeout", res: map[string]any{"timeout": json.Number("900")}, runtime: "vmcontext"},
		{name: "zero timeout", res: map[string]any{"timeout": json.Number("0")}, expr: "timeout", text: timeoutText},
		{name: "negative timeout", res: map[string]any{"timeout": json.Number("-1")}, expr: "timeout", text: timeoutText},
		{name: "timeout too long", res: map[string]any{"timeout": json.Number("901")}, expr: "timeout", text: timeoutText},
		{name: "fractional timeout", res: map[string]any{"timeout": json.Number("1.5")}, expr: "timeout", text: timeoutText},
		{name: "timeout in exponent form", res: map[string]any{"timeout": json.Number("1e2")}, expr: "timeout", text: timeoutText},
		{name: "timeout as a string", res: map[string]any{"timeout": "10"}, expr: "timeout", text: timeoutText},
		{name: "null timeout", res: map[string]any{"timeout": nil}, expr: "timeout", text: timeoutText},
		{name: "timeout as a boolean", res: map[string]any{"timeout": true}, expr: "timeout", text: timeoutText},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBotSettings(tc.res)
			if tc.text != "" {
				fe := wantError(t, err, 400, tc.text)
				if !reflect.DeepEqual(fe.Outcome.Issue[0].Expression, []string{tc.expr}) {
					t.Fatalf("expression %v, want %s", fe.Outcome.Issue[0].Expression, tc.expr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.res["runtimeVersion"] != tc.runtime {
				t.Fatalf("runtimeVersion %v, want %v", tc.res["runtimeVersion"], tc.runtime)
			}
		})
	}
}

// A new bot's source starts as the starter, in a Binary its sourceCode
// names.
func TestStarterSource(t *testing.T) {
	bin := binary("text/typescript", starterCode)
	if bin["resourceType"] != "Binary" || bin["contentType"] != "text/typescript" {
		t.Fatalf("%v", bin)
	}
	src, err := base64.StdEncoding.DecodeString(bin["data"].(string))
	if err != nil || string(src) != starterCode {
		t.Fatalf("data %q %v", src, err)
	}
	want := map[string]any{"contentType": "text/typescript", "title": "index.ts", "url": "Binary/s1"}
	if got := starterSource("s1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}
