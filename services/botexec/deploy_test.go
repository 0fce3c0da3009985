package botexec

import (
	"encoding/base64"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

func TestReadDeployInput(t *testing.T) {
	cases := []struct {
		name, contentType, body string
		code, filename          string
		status                  int
		text                    string
	}{
		{name: "code and filename", contentType: "application/json", body: `{"code":"exports.handler = 1;","filename":"bot.js"}`, code: "exports.handler = 1;", filename: "bot.js"},
		{name: "typescript", contentType: "application/json", body: `{"code":"x","filename":"bot.ts"}`, code: "x", filename: "bot.ts"},
		{name: "fhir json", contentType: "application/fhir+json", body: `{"code":"x","filename":"a.js"}`, code: "x", filename: "a.js"},
		{name: "json with charset", contentType: "application/json; charset=utf-8", body: `{"code":"x"}`, code: "x", filename: "index.js"},
		{name: "no filename", contentType: "application/json", body: `{"code":"x"}`, code: "x", filename: "index.js"},
		{name: "empty filename", contentType: "application/json", body: `{"code":"x","filename":""}`, code: "x", filename: "index.js"},
		// Only the base name titles the code: where it was built is the caller's.
		{name: "filename with folders", contentType: "application/json", body: `{"code":"x","filename":"dist/src/greeter.js"}`, code: "x", filename: "greeter.js"},
		{name: "absolute filename", contentType: "application/json", body: `{"code":"x","filename":"/home/me/bot.ts"}`, code: "x", filename: "bot.ts"},
		{name: "filename climbing out", contentType: "application/json", body: `{"code":"x","filename":"../../etc/bot.js"}`, code: "x", filename: "bot.js"},
		{name: "filename ending in a slash", contentType: "application/json", body: `{"code":"x","filename":"dir/"}`, code: "x", filename: "dir"},
		{name: "filename with backslashes", contentType: "application/json", body: `{"code":"x","filename":"C:\\bots\\a.js"}`, code: "x", filename: `C:\bots\a.js`},
		{name: "filename a slash", contentType: "application/json", body: `{"code":"x","filename":"/"}`, code: "x", filename: "/"},
		// Without code the current code is deployed again.
		{name: "no code", contentType: "application/json", body: `{"filename":"a.js"}`, code: "", filename: "a.js"},
		{name: "null code", contentType: "application/json", body: `{"code":null}`, code: "", filename: "index.js"},
		{name: "empty object", contentType: "application/json", body: `{}`, code: "", filename: "index.js"},
		{name: "null body", contentType: "application/json", body: `null`, code: "", filename: "index.js"},
		// Medplum's web app posts no body and no content type: no code.
		{name: "no body", contentType: "", body: ``, code: "", filename: "index.js"},
		{name: "empty json body", contentType: "application/json", body: ``, code: "", filename: "index.js"},
		{name: "only whitespace", contentType: "text/plain", body: " \r\n", code: "", filename: "index.js"},
		{name: "unknown fields ignored", contentType: "application/json", body: `{"code":"x","other":1}`, code: "x", filename: "index.js"},

		{name: "text", contentType: "text/plain", body: `{"code":"x"}`, status: 415, text: "Unsupported media type"},
		{name: "no content type", contentType: "", body: `{"code":"x"}`, status: 415, text: "Unsupported media type"},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: `code=x`, status: 415, text: "Unsupported media type"},
		{name: "bad json", contentType: "application/json", body: `{"code":`, status: 400, text: "Content could not be parsed"},
		{name: "code not a string", contentType: "application/json", body: `{"code":1}`, status: 400, text: "Content could not be parsed"},
		{name: "filename not a string", contentType: "application/json", body: `{"code":"x","filename":["a.js"]}`, status: 400, text: "Content could not be parsed"},
		{name: "array", contentType: "application/json", body: `[]`, status: 400, text: "Content could not be parsed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &bus.Request{Method: "POST", Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)}
			in, err := readDeployInput(r)
			if tc.status != 0 {
				wantError(t, err, tc.status, tc.text)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.Code != tc.code || in.Filename != tc.filename {
				t.Fatalf("%q %q, want %q %q", in.Code, in.Filename, tc.code, tc.filename)
			}
		})
	}
}

// $deploy names the compiled JavaScript, titled with the file name sent.
func TestExecutableCode(t *testing.T) {
	want := map[string]any{"contentType": "application/javascript", "title": "greeter.ts", "url": "Binary/b9"}
	if got := executableCode("greeter.ts", "b9"); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	// What program reads back from it.
	if id, err := codeBinary("https://pinion.example/", executableCode("a.js", "b9")["url"].(string)); err != nil || id != "b9" {
		t.Fatalf("%q %v", id, err)
	}
}

func TestBinary(t *testing.T) {
	cases := []struct{ contentType, text string }{
		{"application/javascript", "exports.handler = async () => 'hé';"},
		{"text/typescript", ""},
		{"application/javascript", "\x00\xff binary"},
	}
	for _, tc := range cases {
		bin := binary(tc.contentType, tc.text)
		if len(bin) != 3 || bin["resourceType"] != "Binary" || bin["contentType"] != tc.contentType {
			t.Errorf("%v", bin)
		}
		data, err := base64.StdEncoding.DecodeString(bin["data"].(string))
		if err != nil || string(data) != tc.text {
			t.Errorf("data %q %v, want %q", data, err, tc.text)
		}
	}
}
