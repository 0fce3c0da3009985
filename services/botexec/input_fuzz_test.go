package botexec

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// FuzzBotInput: whatever body and content type a caller sends, turning it
// into event.input never panics, and a refusal is a 400, 413 or 415.
func FuzzBotInput(f *testing.F) {
	f.Add("application/x-www-form-urlencoded", []byte("a=1&b=%zz&c"))
	f.Add("application/json; charset=utf-8", []byte(`{"a":[1,2,{"b":null}]}`))
	f.Add("x-application/hl7-v2+er7", []byte("MSH|^~\\&|A|B|C|D|202001011200||ADT^A01|1|P|2.5\rPID|1"))
	f.Add("text/plain", []byte("hello"))
	f.Add("multipart/form-data; boundary=x", []byte("--x--"))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		r := &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": ct}, Body: body}
		in, err := botInput(r)
		if err != nil {
			var fe *fhir.Error
			if !errors.As(err, &fe) || (fe.Status != 400 && fe.Status != 413 && fe.Status != 415) {
				t.Fatalf("refusal is not a 400, 413 or 415: %v", err)
			}
			return
		}
		// What the worker parses as JSON is JSON.
		if in.kind == worker.InputJSON && !json.Valid(in.body) {
			t.Fatalf("invalid JSON input %q", in.body)
		}
	})
}
