package worker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/botexec/sandbox"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []struct {
		h       *header
		payload [][]byte
	}{
		{&header{T: msgReady}, nil},
		{&header{T: msgRun, ID: 7, Key: "Binary/1/2", Name: "Bot/1", CodeLen: 5, InputKind: inputJSON,
			Event:  &eventHeader{Bot: map[string]any{"reference": "Bot/1"}, ContentType: "application/json", Secrets: map[string]any{"K": "v"}, TraceID: "t", Headers: map[string]string{"h": "1"}},
			Limits: &sandbox.Limits{Timeout: 1500, MaxOutputBytes: 10}},
			[][]byte{[]byte("code!"), []byte(`{"raw":"json\n\u0000"}`)}},
		{&header{T: msgHost, ID: 7, Call: 3, Method: "POST", Path: "Patient", ContentType: "application/fhir+json"}, [][]byte{{0, 1, 2, 255}}},
		{&header{T: msgResult, ID: 7, TextLen: 2, Stuck: true, Result: &sandbox.Result{Kind: sandbox.KindString, JSON: json.RawMessage("null"), Log: "a\n", Err: &sandbox.BotError{Message: "m", Limit: sandbox.LimitOutput}}}, [][]byte{[]byte("hi"), []byte(`"hi"`)}},
		{&header{T: msgResult, ID: 8, Fault: &fault{Status: 500, Message: "x"}}, [][]byte{nil, {}}},
	}
	var buf bytes.Buffer
	c := newConn(&buf, &buf)
	for _, f := range frames {
		if err := c.send(f.h, f.payload...); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range frames {
		h, payload, err := c.recv()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(h, f.h) {
			t.Errorf("frame %d header\n got %+v\nwant %+v", i, h, f.h)
		}
		if want := bytes.Join(f.payload, nil); !bytes.Equal(payload, want) {
			t.Errorf("frame %d payload %q, want %q", i, payload, want)
		}
	}
	if _, _, err := c.recv(); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestSendRefusesOversizeFrames(t *testing.T) {
	var buf bytes.Buffer
	c := newConn(&buf, &buf)
	// 64 slices of one MiB: over the limit by the header, with one MiB
	// allocated.
	mib := make([]byte, 1<<20)
	payload := make([][]byte, maxFrame/len(mib))
	for i := range payload {
		payload[i] = mib
	}
	h := &header{T: msgHostReply, ID: 1, Call: 1}
	hb, _ := json.Marshal(h)
	err := c.send(h, payload...)
	want := "bot worker: frame of " + strconv.Itoa(maxFrame+4+len(hb)) + " bytes is over the limit"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written for a refused frame", buf.Len())
	}
	// The largest frame allowed goes.
	if err := c.send(h, payload[:len(payload)-1]...); err != nil {
		t.Errorf("a frame under the limit: %v", err)
	}
}

func TestSendReportsWriteErrors(t *testing.T) {
	broken := errors.New("pipe closed")
	c := newConn(strings.NewReader(""), failingWriter{broken})
	if err := c.send(&header{T: msgReady}); !errors.Is(err, broken) {
		t.Errorf("err = %v, want %v", err, broken)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// prefix is a frame's first 8 bytes: its length and its header's length.
func prefix(n, hn uint32) []byte {
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], n)
	binary.BigEndian.PutUint32(b[4:], hn)
	return b[:]
}

func TestRecvRefusesMalformedFrames(t *testing.T) {
	tests := []struct {
		name    string
		stream  []byte
		wantErr string // exact, or the prefix of a wrapped JSON error when jsonErr
		jsonErr bool
		is      error
	}{
		{"nothing", nil, "", false, io.EOF},
		{"a cut prefix", []byte{0, 0, 0}, "", false, io.ErrUnexpectedEOF},
		{"a cut body", append(prefix(100, 2), "{}"...), "", false, io.ErrUnexpectedEOF},
		{"longer than the limit", prefix(maxFrame+1, 2), "bot worker: bad frame (67108865 bytes, header 2)", false, nil},
		{"shorter than its header length field", prefix(2, 0), "bot worker: bad frame (2 bytes, header 0)", false, nil},
		{"header longer than the frame", append(prefix(10, 7), "{}{}{}"...), "bot worker: bad frame (10 bytes, header 7)", false, nil},
		{"header length that wraps around", append(prefix(8, 0xFFFFFFFE), "{}{}"...), "bot worker: bad frame (8 bytes, header 4294967294)", false, nil},
		{"header that is not JSON", append(prefix(6, 2), "{x"...), "bot worker: bad frame header: ", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConn(bytes.NewReader(tt.stream), io.Discard)
			h, payload, err := c.recv()
			if h != nil || payload != nil || err == nil {
				t.Fatalf("recv = %+v, %q, %v", h, payload, err)
			}
			switch {
			case tt.is != nil:
				if !errors.Is(err, tt.is) {
					t.Errorf("err = %v, want %v", err, tt.is)
				}
			case tt.jsonErr:
				var se *json.SyntaxError
				if !strings.HasPrefix(err.Error(), tt.wantErr) || !errors.As(err, &se) {
					t.Errorf("err = %v, want %q wrapping a JSON syntax error", err, tt.wantErr)
				}
			case err.Error() != tt.wantErr:
				t.Errorf("err = %q, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		status  int
		wantErr string
	}{
		{"a *fhir.Error keeps its status and outcome", fhir.TooLarge("hl7: more than 8388608 bytes"), 413, "413 hl7: more than 8388608 bytes"},
		{"wrapped", fmt.Errorf("compile: %w", fhir.BadRequest("Syntax error", "bot.js:1:1")), 400, "400 Syntax error (bot.js:1:1)"},
		{"anything else is a 500 with its text", errors.New("sandbox: panic while running Bot/1: boom"), 500, "bot worker: sandbox: panic while running Bot/1: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A fault travels as JSON in a frame header.
			b, err := json.Marshal(faultOf(tt.err))
			if err != nil {
				t.Fatal(err)
			}
			var f fault
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			if f.Status != tt.status {
				t.Errorf("status %d, want %d", f.Status, tt.status)
			}
			got := f.err()
			if got.Error() != tt.wantErr {
				t.Errorf("err %q, want %q", got, tt.wantErr)
			}
			var fe *fhir.Error
			if isFHIR := errors.As(got, &fe); isFHIR != (tt.status != 500) {
				t.Errorf("*fhir.Error %v for status %d", isFHIR, tt.status)
			} else if isFHIR && (fe.Status != tt.status || !reflect.DeepEqual(fe.Outcome, fhir.AsError(tt.err).Outcome)) {
				t.Errorf("outcome %+v, want %+v", fe.Outcome, fhir.AsError(tt.err).Outcome)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct{ why, want string }{
		{"exit status 2: fatal error: runtime: out of memory", "out of memory"},
		{"exit status 2: runtime: cannot allocate memory", "out of memory"},
		{"exit status 2: fatal error: stack overflow", "stack overflow"},
		{"exit status 2: runtime: goroutine stack exceeds 67108864-byte limit", "stack overflow"},
		{"a run outlived its deadline", "did not stop at its deadline"},
		{"signal: killed", "killed"},
		{"exit status 2: fatal error: concurrent map writes at 0xc000012345", "fatal error"},
		{"exited", "fatal error"},
	}
	for _, tt := range tests {
		t.Run(tt.want+"/"+tt.why, func(t *testing.T) {
			if got := summary(tt.why); got != tt.want {
				t.Errorf("summary(%q) = %q, want %q", tt.why, got, tt.want)
			}
		})
	}
}

func TestCrashedResult(t *testing.T) {
	res := crashed("out of memory")
	if res.Err == nil || res.Err.Limit != sandbox.LimitWorker || res.Err.Message != "Bot run ended: its worker process stopped (out of memory)" {
		t.Errorf("crashed = %+v", res.Err)
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing", nil, ""},
		{"the last line", []string{"started\n", "running\n"}, "running"},
		{"a line without its newline", []string{"a\nb"}, "b"},
		{"the first fatal error", []string{"fatal error: runtime: out of memory\n\ngoroutine 1 [running]:\nmain.main()\n"}, "fatal error: runtime: out of memory"},
		{"a fatal error written in pieces", []string{"fatal err", "or: stack overflow\nmore\n"}, "fatal error: stack overflow"},
		{"only the first fatal error", []string{"fatal error: one\nfatal error: two\n"}, "fatal error: one"},
		{"a stack limit", []string{"runtime: goroutine stack exceeds 67108864-byte limit\nfatal error: stack overflow\n"}, "runtime: goroutine stack exceeds 67108864-byte limit"},
		{"other runtime lines are not fatal", []string{"runtime: note\nlast\n"}, "last"},
		{"a long fatal line is cut", []string{"fatal error: " + strings.Repeat("x", 1000) + "\n"}, "fatal error: " + strings.Repeat("x", 512-len("fatal error: "))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tl tail
			for _, w := range tt.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tl.last(); got != tt.want {
				t.Errorf("last() = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("keeps only the last few kilobytes", func(t *testing.T) {
		var tl tail
		for i := 0; i < 1000; i++ {
			_, _ = tl.Write([]byte("line " + strconv.Itoa(i) + "\n"))
		}
		if len(tl.buf) != tailSize || tl.last() != "line 999" {
			t.Errorf("kept %d bytes, last %q", len(tl.buf), tl.last())
		}
	})
}
