package botexec

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/hl7"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
	"github.com/pinion-health/pinion/services/botexec/worker"
)

// wantError fails unless err is a *fhir.Error with the status and details
// text.
func wantError(t *testing.T, err error, status int, text string) *fhir.Error {
	t.Helper()
	var fe *fhir.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want %d %q", err, err, status, text)
	}
	if fe.Status != status || fe.Message() != text {
		t.Fatalf("error %d %q, want %d %q", fe.Status, fe.Message(), status, text)
	}
	return fe
}

// adt is an ADT^A01 message, segments separated by \r.
const adt = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB|GHH|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.5\r" +
	"EVN|A01|200708181123\r" +
	"PID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR||EVERYMAN^ADAM^A^III||19610615|M"

// nested is JSON arrays nested depth deep.
func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// hl7Segments is an MSH followed by n OBX segments of fields empty fields.
func hl7Segments(n, fields int) string {
	var b strings.Builder
	b.WriteString("MSH|^~\\&|A|B|C|D|202001011200||ORU^R01|1|P|2.5")
	for range n {
		b.WriteString("\rOBX")
		b.WriteString(strings.Repeat("|", fields))
	}
	return b.String()
}

func TestBotInputPost(t *testing.T) {
	cases := []struct {
		name, contentType, body string
		// wantKind, wantBody and wantType are the input the bot gets; or
		// status and text the refusal.
		wantKind, wantBody, wantType string
		status                       int
		text                         string
	}{
		// Text is handed over as sent.
		{name: "text", contentType: "text/plain", body: "hello", wantKind: worker.InputText, wantBody: "hello", wantType: "text/plain"},
		{name: "text with charset", contentType: "text/plain; charset=utf-8", body: "hé", wantKind: worker.InputText, wantBody: "hé", wantType: "text/plain"},
		{name: "text, type in capitals", contentType: "Text/Plain", body: "x", wantKind: worker.InputText, wantBody: "x", wantType: "text/plain"},
		{name: "empty text", contentType: "text/plain", body: "", wantKind: worker.InputText, wantBody: "", wantType: "text/plain"},
		{name: "text that looks like JSON stays text", contentType: "text/plain", body: `{"a":`, wantKind: worker.InputText, wantBody: `{"a":`, wantType: "text/plain"},

		// JSON is checked and handed over raw: key order and spacing kept.
		{name: "json", contentType: "application/json", body: `{"b":1, "a":[true]}`, wantKind: worker.InputJSON, wantBody: `{"b":1, "a":[true]}`, wantType: "application/json"},
		{name: "json with charset", contentType: "application/json; charset=utf-8", body: `{}`, wantKind: worker.InputJSON, wantBody: `{}`, wantType: "application/json"},
		{name: "fhir json", contentType: "application/fhir+json", body: `{"resourceType":"Patient"}`, wantKind: worker.InputJSON, wantBody: `{"resourceType":"Patient"}`, wantType: "application/fhir+json"},
		{name: "json string", contentType: "application/json", body: `"just a string"`, wantKind: worker.InputJSON, wantBody: `"just a string"`, wantType: "application/json"},
		{name: "json number", contentType: "application/json", body: `42`, wantKind: worker.InputJSON, wantBody: `42`, wantType: "application/json"},
		{name: "json null", contentType: "application/json", body: `null`, wantKind: worker.InputJSON, wantBody: `null`, wantType: "application/json"},
		{name: "json at the depth bound", contentType: "application/json", body: nested(maxInputDepth), wantKind: worker.InputJSON, wantBody: nested(maxInputDepth), wantType: "application/json"},
		{name: "brackets in strings are not depth", contentType: "application/json", body: `["` + strings.Repeat("[", 2*maxInputDepth) + `"]`, wantKind: worker.InputJSON, wantBody: `["` + strings.Repeat("[", 2*maxInputDepth) + `"]`, wantType: "application/json"},
		{name: "truncated json", contentType: "application/json", body: `{"a":`, status: 400, text: "Content could not be parsed: unexpected end of JSON input"},
		{name: "empty json", contentType: "application/json", body: ``, status: 400, text: "Content could not be parsed: unexpected end of JSON input"},
		{name: "json with trailing text", contentType: "application/fhir+json", body: `{} x`, status: 400, text: "Content could not be parsed: invalid character 'x' after top-level value"},
		{name: "json with a bad token", contentType: "application/json", body: `{'a':1}`, status: 400, text: "Content could not be parsed: invalid character '\\'' looking for beginning of object key string"},
		{name: "json past the depth bound", contentType: "application/json", body: nested(maxInputDepth + 1), status: 400, text: "Content could not be parsed: nested too deeply"},
		{name: "fhir json past the depth bound", contentType: "application/fhir+json", body: `{"a":` + nested(maxInputDepth) + `}`, status: 400, text: "Content could not be parsed: nested too deeply"},

		// A form is an object of each name's first value.
		{name: "form", contentType: "application/x-www-form-urlencoded", body: "a=1&b=two", wantKind: worker.InputJSON, wantBody: `{"a":"1","b":"two"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, escapes decoded", contentType: "application/x-www-form-urlencoded", body: "name=Ada+Lovelace&tag=a%26b%3Dc", wantKind: worker.InputJSON, wantBody: `{"name":"Ada Lovelace","tag":"a\u0026b=c"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, first value wins", contentType: "application/x-www-form-urlencoded", body: "a=1&a=2", wantKind: worker.InputJSON, wantBody: `{"a":"1"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, name without value", contentType: "application/x-www-form-urlencoded", body: "c", wantKind: worker.InputJSON, wantBody: `{"c":""}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, keys sorted", contentType: "application/x-www-form-urlencoded", body: "z=1&a=2&m=3", wantKind: worker.InputJSON, wantBody: `{"a":"2","m":"3","z":"1"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, identifier is input", contentType: "application/x-www-form-urlencoded", body: "identifier=x", wantKind: worker.InputJSON, wantBody: `{"identifier":"x"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form, empty name kept", contentType: "application/x-www-form-urlencoded", body: "=v", wantKind: worker.InputJSON, wantBody: `{"":"v"}`, wantType: "application/x-www-form-urlencoded"},
		{name: "empty form", contentType: "application/x-www-form-urlencoded", body: "", wantKind: worker.InputJSON, wantBody: `{}`, wantType: "application/x-www-form-urlencoded"},
		{name: "form with a bad escape", contentType: "application/x-www-form-urlencoded", body: "a=1&b=%zz", status: 400, text: `Content could not be parsed: invalid URL escape "%zz"`},
		{name: "form with a semicolon", contentType: "application/x-www-form-urlencoded", body: "a=1;b=2", status: 400, text: "Content could not be parsed: invalid semicolon separator in query"},

		// HL7 is parsed to check it, and handed over as sent.
		{name: "hl7", contentType: sandbox.HL7ContentType, body: adt, wantKind: worker.InputHL7, wantBody: adt, wantType: sandbox.HL7ContentType},
		{name: "hl7, type in capitals", contentType: "X-Application/HL7-V2+ER7; charset=utf-8", body: adt, wantKind: worker.InputHL7, wantBody: adt, wantType: sandbox.HL7ContentType},
		{name: "hl7 under the element bound", contentType: sandbox.HL7ContentType, body: hl7Segments(40, 900), wantKind: worker.InputHL7, wantBody: hl7Segments(40, 900), wantType: sandbox.HL7ContentType},
		{name: "hl7 without MSH", contentType: sandbox.HL7ContentType, body: "PID|1", status: 400, text: "Invalid HL7 message: hl7: segment 1, column 1 (offset 0): message must start with an MSH segment"},
		{name: "empty hl7", contentType: sandbox.HL7ContentType, body: "", status: 400, text: "Invalid HL7 message: hl7: segment 1, column 1 (offset 0): message must start with an MSH segment"},
		{name: "hl7 over the field bound", contentType: sandbox.HL7ContentType, body: hl7Segments(1, 1001), status: 413, text: "HL7 message too large: hl7: more than 1000 fields in segment 2 (OBX)"},
		{name: "hl7 over the byte bound", contentType: sandbox.HL7ContentType, body: "MSH|^~\\&|" + strings.Repeat("x", 8<<20), status: 413, text: "HL7 message too large: hl7: more than 8388608 bytes"},

		// Everything else is refused before any bot runs.
		{name: "no content type", contentType: "", body: "x", status: 415, text: "Unsupported media type"},
		{name: "malformed content type", contentType: "text/plain; charset", body: "x", status: 415, text: "Unsupported media type"},
		{name: "content type without subtype", contentType: "text", body: "x", status: 415, text: "Unsupported media type"},
		{name: "image", contentType: "image/png", body: "x", status: 415, text: "Unsupported media type"},
		{name: "multipart", contentType: "multipart/form-data; boundary=x", body: "--x--", status: 415, text: "Unsupported media type"},
		{name: "fhir xml", contentType: "application/fhir+xml", body: "<Patient/>", status: 415, text: "Unsupported media type"},
		{name: "html", contentType: "text/html", body: "<p>", status: 415, text: "Unsupported media type"},
		{name: "octet stream", contentType: "application/octet-stream", body: "x", status: 415, text: "Unsupported media type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)}
			in, err := botInput(r)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.kind != tc.wantKind || string(in.body) != tc.wantBody || in.mediaType != tc.wantType {
				t.Fatalf("input %s %.80q (%s), want %s %.80q (%s)", in.kind, in.body, in.mediaType, tc.wantKind, tc.wantBody, tc.wantType)
			}
		})
	}
}

// The element bound is the bot executor's own, tighter than pkg/hl7's: a
// message the default limits accept is refused.
func TestBotInputHL7ElementBound(t *testing.T) {
	msg := hl7Segments(250, 900)
	if _, err := hl7.Parse(msg); err != nil {
		t.Fatalf("pkg/hl7's own limits refuse the message: %v", err)
	}
	r := &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": sandbox.HL7ContentType}, Body: []byte(msg)}
	_, err := botInput(r)
	const prefix = "HL7 message too large: hl7: more than 200000 elements"
	if fe := fhir.AsError(err); fe.Status != 413 || !strings.HasPrefix(fe.Message(), prefix) {
		t.Fatalf("%v, want 413 %q…", err, prefix)
	}
}

func TestBotInputGet(t *testing.T) {
	cases := []struct {
		name   string
		query  url.Values
		header map[string]string
		body   string
		want   string
	}{
		{name: "query parameters", query: url.Values{"x": {"1"}, "y": {"two words"}}, want: `{"x":"1","y":"two words"}`},
		{name: "identifier names the bot, not input", query: url.Values{"identifier": {"https://example.com/bots|echo"}, "a": {"2"}}, want: `{"a":"2"}`},
		{name: "only an identifier", query: url.Values{"identifier": {"echo"}}, want: `{}`},
		{name: "first value wins", query: url.Values{"a": {"1", "2"}}, want: `{"a":"1"}`},
		{name: "a name without values is left out", query: url.Values{"a": {}, "b": {""}}, want: `{"b":""}`},
		{name: "no query", query: nil, want: `{}`},
		{name: "body and content type ignored", query: url.Values{"k": {"v"}}, header: map[string]string{"Content-Type": "image/png"}, body: "not read", want: `{"k":"v"}`},
		{name: "keys sorted", query: url.Values{"b": {"1"}, "a": {"2"}, "c": {"3"}}, want: `{"a":"2","b":"1","c":"3"}`},
		{name: "JSON escaping", query: url.Values{"q": {`"<&>"`}}, want: `{"q":"\"\u003c\u0026\u003e\""}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Method: "GET", Query: tc.query, Header: tc.header, Body: []byte(tc.body)}
			in, err := botInput(r)
			if err != nil {
				t.Fatal(err)
			}
			// No media type: a string answer goes back as JSON.
			if in.kind != worker.InputJSON || string(in.body) != tc.want || in.mediaType != "" {
				t.Fatalf("input %s %s (%q), want json %s", in.kind, in.body, in.mediaType, tc.want)
			}
		})
	}
}

// Reading the query as input leaves the request's own query alone.
func TestBotInputGetKeepsQuery(t *testing.T) {
	q := url.Values{"identifier": {"echo"}, "a": {"1"}}
	if _, err := botInput(&bus.Request{Method: "GET", Query: q}); err != nil {
		t.Fatal(err)
	}
	if q.Get("identifier") != "echo" || len(q) != 2 {
		t.Fatalf("query changed: %v", q)
	}
}
