package hl7

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// adtA01 is a typical admission message, with repetitions (PID-3),
// subcomponents (PID-3.4), an escaped delimiter (PID-11) and a Z-segment.
var adtA01 = strings.Join([]string{
	`MSH|^~\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB, INC.|GOOD HEALTH HOSPITAL|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.8||`,
	`EVN|A01|200708181123||`,
	`PID|1||PATID1234^5^M11^ADT1&1.2.3&ISO^MR^GOOD HEALTH HOSPITAL~123456789^^^USSSA^SS||EVERYMAN^ADAM^A^III||19610615|M||C|2222 HOME STREET\S\APT 4^^GREENSBORO^NC^27401-1020|GL|(555) 555-2004|(555)555-2004||S||PATID12345001^2^M10^ADT1^AN^A|444333333|987654^NC|`,
	`NK1|1|NUCLEAR^NELDA^W|SPO^SPOUSE||||NK^NEXT OF KIN`,
	`PV1|1|I|2000^2012^01||||004777^ATTEND^AARON^A|||SUR||||ADM|A0|`,
	`ZPI|custom\E\value|\X0D0A\|\.br\`,
}, "\r")

func TestParseADTRoundTrip(t *testing.T) {
	m, err := Parse(adtA01)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != adtA01 {
		t.Fatalf("String() differs from input:\n got %q\nwant %q", got, adtA01)
	}
	if len(m.Segments) != 6 {
		t.Fatalf("segments = %d, want 6", len(m.Segments))
	}
	if m.Enc != DefaultEncoding {
		t.Fatalf("encoding = %+v", m.Enc)
	}
	msh, pid := m.Header(), m.Get("PID")
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"MSH-1 is the field separator", msh.Component(1, 1, 1, 1), "|"},
		{"MSH-2 is the encoding characters", msh.Component(2, 1, 1, 1), `^~\&`},
		{"MSH-3 sending application", msh.Component(3, 1, 1, 1), "ADT1"},
		{"MSH-9.1 message code", msh.Component(9, 1, 1, 1), "ADT"},
		{"MSH-9.2 trigger event", msh.Component(9, 2, 0, 0), "A01"},
		{"MSH-10 control id", msh.Component(10, 1, 1, 1), "MSG00001"},
		{"MSH-12 version", msh.Component(12, 1, 1, 1), "2.8"},
		{"PID-3.1 first repetition", pid.Component(3, 1, 1, 1), "PATID1234"},
		{"PID-3.4.2 subcomponent", pid.Component(3, 4, 2, 1), "1.2.3"},
		{"PID-3.1 second repetition", pid.Component(3, 1, 1, 2), "123456789"},
		{"PID-3.4 second repetition", pid.Component(3, 4, 1, 2), "USSSA"},
		{"PID-5 family name", pid.Component(5, 1, 1, 1), "EVERYMAN"},
		{"PID-11.1 raw keeps escapes", pid.Component(11, 1, 1, 1), `2222 HOME STREET\S\APT 4`},
		{"PID-11.1 unescaped", m.Unescape(pid.Component(11, 1, 1, 1)), "2222 HOME STREET^APT 4"},
		{"absent field", pid.Component(99, 1, 1, 1), ""},
		{"absent component", pid.Component(5, 9, 1, 1), ""},
		{"absent repetition", pid.Component(5, 1, 1, 3), ""},
		{"absent subcomponent", pid.Component(5, 1, 4, 1), ""},
		{"whole field", m.Enc.FormatField(pid.Field(5)), "EVERYMAN^ADAM^A^III"},
		{"whole component", m.Enc.FormatComponent(pid.Field(3)[0][3]), "ADT1&1.2.3&ISO"},
		{"segment", m.Enc.FormatSegment(m.Get("NK1")), "NK1|1|NUCLEAR^NELDA^W|SPO^SPOUSE||||NK^NEXT OF KIN"},
		{"Z segment escapes", m.Unescape(m.Get("ZPI").Component(1, 1, 1, 1)), `custom\value`},
		{"hex escape", m.Unescape(m.Get("ZPI").Component(2, 1, 1, 1)), "\r\n"},
		{"formatting escape kept", m.Unescape(m.Get("ZPI").Component(3, 1, 1, 1)), `\.br\`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
	if n := len(m.GetAll("PID")); n != 1 {
		t.Errorf("GetAll(PID) = %d segments", n)
	}
	if m.Get("OBX") != nil || m.GetAll("OBX") != nil {
		t.Error("absent segment found")
	}
}

func TestParseSeparatorsAndShapes(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantString string
		segments   int
		check      func(t *testing.T, m *Message)
	}{
		{name: "LF separators", in: "MSH|^~\\&|A\nPID|1", wantString: "MSH|^~\\&|A\rPID|1", segments: 2},
		{name: "CRLF separators", in: "MSH|^~\\&|A\r\nPID|1\r\n", wantString: "MSH|^~\\&|A\rPID|1", segments: 2},
		{name: "blank lines skipped", in: "MSH|^~\\&|A\r\r\n\nPID|1\r", wantString: "MSH|^~\\&|A\rPID|1", segments: 2},
		{name: "MSH with only encoding", in: "MSH|^~\\&", wantString: "MSH|^~\\&", segments: 1,
			check: func(t *testing.T, m *Message) {
				if n := len(m.Header().Fields); n != 2 {
					t.Errorf("MSH fields = %d, want 2", n)
				}
			}},
		{name: "segment without fields", in: "MSH|^~\\&|A\rPID", wantString: "MSH|^~\\&|A\rPID", segments: 2,
			check: func(t *testing.T, m *Message) {
				if m.Get("PID").Fields != nil {
					t.Error("PID should have no fields")
				}
			}},
		{name: "segment with one empty field", in: "MSH|^~\\&|A\rPID|", wantString: "MSH|^~\\&|A\rPID|", segments: 2,
			check: func(t *testing.T, m *Message) {
				if n := len(m.Get("PID").Fields); n != 1 {
					t.Errorf("PID fields = %d, want 1", n)
				}
			}},
		{name: "custom delimiters", in: "MSH#*!/$#A*B!C$D#x/F/y\rPID#1#a*b$c!d", wantString: "MSH#*!/$#A*B!C$D#x/F/y\rPID#1#a*b$c!d", segments: 2,
			check: func(t *testing.T, m *Message) {
				want := Encoding{Field: '#', Component: '*', Repetition: '!', EscapeChar: '/', Subcomponent: '$'}
				if m.Enc != want {
					t.Errorf("enc = %+v", m.Enc)
				}
				msh := m.Header()
				if got := msh.Component(3, 2, 1, 1); got != "B" {
					t.Errorf("MSH-3.2 = %q", got)
				}
				if got := msh.Component(3, 1, 1, 2); got != "C" {
					t.Errorf("MSH-3 rep 2 = %q", got)
				}
				if got := msh.Component(3, 1, 2, 2); got != "D" {
					t.Errorf("MSH-3 rep 2 sub 2 = %q", got)
				}
				if got := m.Unescape(msh.Component(4, 1, 1, 1)); got != "x#y" {
					t.Errorf("MSH-4 unescaped = %q", got)
				}
				if got := m.Get("PID").Component(2, 2, 2, 1); got != "c" {
					t.Errorf("PID-2.2.2 = %q", got)
				}
			}},
		{name: "truncation character", in: "MSH|^~\\&#|A\\P\\B", wantString: "MSH|^~\\&#|A\\P\\B", segments: 1,
			check: func(t *testing.T, m *Message) {
				if m.Enc.Truncation != '#' {
					t.Errorf("truncation = %q", m.Enc.Truncation)
				}
				if got := m.Unescape(m.Header().Component(3, 1, 1, 1)); got != "A#B" {
					t.Errorf("MSH-3 = %q", got)
				}
			}},
		{name: "second MSH with same encoding", in: "MSH|^~\\&|A\rMSH|^~\\&|B", wantString: "MSH|^~\\&|A\rMSH|^~\\&|B", segments: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.String(); got != tt.wantString {
				t.Errorf("String() = %q, want %q", got, tt.wantString)
			}
			if len(m.Segments) != tt.segments {
				t.Errorf("segments = %d, want %d", len(m.Segments), tt.segments)
			}
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		segment int
		offset  int
		msg     string
	}{
		{"empty", "", 1, 0, "must start with an MSH"},
		{"not MSH", "PID|1", 1, 0, "must start with an MSH"},
		{"leading newline", "\rMSH|^~\\&", 1, 0, "must start with an MSH"},
		{"MSH alone", "MSH", 1, 3, "too short"},
		{"MSH then newline", "MSH\rPID", 1, 3, "too short"},
		{"MSH-2 too short", "MSH|^~|A", 1, 6, "4 encoding characters"},
		{"MSH-2 too long", "MSH|^~\\&#@|A", 1, 9, "at most 5"},
		{"duplicate encoding character", "MSH|^~^&|A", 1, 6, "used twice"},
		{"separator reused as field", "MSH|^~|&|A", 1, 6, "4 encoding characters"},
		{"letter as separator", "MSH|^~\\A|x", 1, 7, "printable ASCII"},
		{"NUL in encoding", "MSH|^~\\\x00|x", 1, 7, "printable ASCII"},
		{"NUL in field", "MSH|^~\\&|A\rPID|a\x00b", 2, 16, "NUL"},
		{"short segment name", "MSH|^~\\&|A\rPI", 2, 11, "not three characters"},
		{"lower-case segment name", "MSH|^~\\&|A\rpid|1", 2, 11, "upper-case"},
		{"long segment name", "MSH|^~\\&|A\rPIDX|1", 2, 14, "expected field separator"},
		{"second MSH with other encoding", "MSH|^~\\&|A\r\nEVN|1\r\nMSH|^~\\#|B", 3, 22, "encoding characters"},
		{"segment number skips blank lines", "MSH|^~\\&|A\n\nEVN\n\nx", 3, 17, "not three characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *ParseError", err)
			}
			if pe.Segment != tt.segment || pe.Offset != tt.offset || !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("got segment %d offset %d %q; want segment %d offset %d containing %q",
					pe.Segment, pe.Offset, pe.Msg, tt.segment, tt.offset, tt.msg)
			}
			if errors.As(err, new(*LimitError)) {
				t.Error("a syntax error is also a *LimitError")
			}
			if !strings.Contains(err.Error(), "segment") || !strings.Contains(err.Error(), "column") {
				t.Errorf("Error() = %q does not say where", err.Error())
			}
		})
	}
}

func TestEscapeUnescape(t *testing.T) {
	enc := DefaultEncoding
	tests := []struct {
		name    string
		raw     string // as it appears in a message
		decoded string
		reverse bool // Escape(decoded) == raw
	}{
		{"field", `a\F\b`, "a|b", true},
		{"component", `a\S\b`, "a^b", true},
		{"subcomponent", `a\T\b`, "a&b", true},
		{"repetition", `a\R\b`, "a~b", true},
		{"escape", `a\E\b`, `a\b`, true},
		{"all delimiters", `\F\\S\\T\\R\\E\`, `|^&~\`, true},
		{"carriage return and line feed", `x\X0D\\X0A\y`, "x\r\ny", true},
		{"multi-byte hex", `\X48656C6C6F\`, "Hello", false},
		{"lower-case hex", `\X0d0a\`, "\r\n", false},
		{"odd hex kept", `\X0D0\`, `\X0D0\`, false},
		{"bad hex kept", `\XZZ\`, `\XZZ\`, false},
		{"formatting kept", `a\.br\b\H\c\N\`, `a\.br\b\H\c\N\`, false},
		{"unterminated kept", `a\F`, `a\F`, false},
		{"empty sequence kept", `a\\b`, `a\\b`, false},
		{"truncation without declaration kept", `\P\`, `\P\`, false},
		{"plain text", "plain", "plain", true},
		{"utf-8", "Zoë", "Zoë", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := enc.Unescape(tt.raw); got != tt.decoded {
				t.Errorf("Unescape(%q) = %q, want %q", tt.raw, got, tt.decoded)
			}
			if tt.reverse {
				if got := enc.Escape(tt.decoded); got != tt.raw {
					t.Errorf("Escape(%q) = %q, want %q", tt.decoded, got, tt.raw)
				}
			}
			if got := enc.Unescape(enc.Escape(tt.decoded)); got != tt.decoded {
				t.Errorf("Unescape(Escape(%q)) = %q", tt.decoded, got)
			}
		})
	}
	custom := Encoding{Field: '#', Component: '*', Repetition: '!', EscapeChar: '/', Subcomponent: '$', Truncation: '%'}
	if got := custom.Escape("a#b*c!d/e$f%g|h"); got != "a/F/b/S/c/R/d/E/e/T/f/P/g|h" {
		t.Errorf("custom Escape = %q", got)
	}
	if got := custom.Unescape("a/F/b/P/c\\F\\"); got != "a#b%c\\F\\" {
		t.Errorf("custom Unescape = %q", got)
	}
}

func TestBuildAck(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return time.Date(2026, 5, 31, 12, 34, 56, 0, time.UTC) }
	tests := []struct {
		name string
		in   string
		code string
		want string
	}{
		{
			name: "three-part message type",
			in:   adtA01,
			want: "MSH|^~\\&|GHH LAB, INC.|GOOD HEALTH HOSPITAL|ADT1|GOOD HEALTH HOSPITAL|20260531123456||ACK^A01^ACK|1780230896000|P|2.8\rMSA|AA|MSG00001|OK",
		},
		{
			name: "two-part message type, error code",
			in:   "MSH|^~\\&|S|SF|R|RF|2024||ORU^R01|C1|P|2.3",
			code: "AE",
			want: "MSH|^~\\&|R|RF|S|SF|20260531123456||ACK^R01|1780230896000|P|2.3\rMSA|AE|C1|Application Error",
		},
		{
			name: "bare message header",
			in:   "MSH|^~\\&|S",
			want: "MSH|^~\\&|||S||20260531123456||ACK|1780230896000|P|2.5.1\rMSA|AA||OK",
		},
		{
			name: "custom delimiters kept",
			in:   "MSH#*!/$#S#SF#R#RF#2024##ADT*A04#C2#P#2.5",
			want: "MSH#*!/$#R#RF#S#SF#20260531123456##ACK*A04#1780230896000#P#2.5\rMSA#AA#C2#OK",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			ack := BuildAck(m, tt.code)
			if got := ack.String(); got != tt.want {
				t.Errorf("ack =\n %q\nwant\n %q", got, tt.want)
			}
			again, err := Parse(ack.String())
			if err != nil {
				t.Fatalf("ack does not parse: %v", err)
			}
			if !reflect.DeepEqual(again, ack) {
				t.Errorf("ack does not round-trip:\n%#v\n%#v", again, ack)
			}
		})
	}
}

// normalise is what String promises for a parsed input: every run of
// segment separators becomes one \r, none leading or trailing.
func normalise(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), "\r")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		adtA01,
		"MSH|^~\\&|A\nPID|1",
		"MSH|^~\\&#|A\\P\\B\r\n",
		"MSH#*!/$#A*B!C$D#x/F/y\rPID#1#a*b$c!d",
		"MSH|^~\\&\rPID\rPV1|",
		"MSH|^~\\&|A\rMSH|^~\\&|B",
		"MSH|^~|A",
		"PID|1",
		"\\X0D\\",
		"MSH|^~\\&|a~b~c~d^e&f&g&h|||||\rPID|||\rNTE\rOBX|1^2^3^4",
		"MSH|^~\\&|A\rPID|a&b&c&d\rPV1|a^b^c^d~e~f~g",
		"MSH|^~\\&|||||||||||||||||||\r\n\r\nZZZ|~~~~|^^^^|&&&&",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		m, err := Parse(in)
		if err != nil {
			var pe *ParseError
			if errors.As(err, new(*LimitError)) {
				return // the limits are checked against a parse under smaller ones below
			}
			if !errors.As(err, &pe) || pe.Segment < 1 || pe.Offset < 0 || pe.Offset > len(in) || pe.Column < 1 {
				t.Fatalf("bad error %#v for %q", err, in)
			}
			return
		}
		// Under small limits, the parse succeeds exactly when the tree is
		// within them, and refuses it naming a limit the tree exceeds.
		small := Limits{MaxBytes: 300, MaxSegments: 4, MaxFields: 6, MaxRepetitions: 3, MaxComponents: 3, MaxSubcomponents: 3, MaxElements: 60}
		over, _ := exceeded(m, len(in), small)
		switch sm, err := ParseLimited(in, small); {
		case err == nil && len(over) > 0:
			t.Fatalf("accepted %q over limits %v", in, over)
		case err == nil && !reflect.DeepEqual(sm, m):
			t.Fatalf("ParseLimited differs from Parse for %q", in)
		case err != nil:
			var le *LimitError
			if !errors.As(err, &le) || !over[le.Limit] {
				t.Fatalf("ParseLimited(%q) = %v; limits exceeded: %v", in, err, over)
			}
		}
		for _, s := range m.Segments {
			got, err := m.Enc.ParseSegment(m.Enc.FormatSegment(s))
			if err != nil || !reflect.DeepEqual(got, s) {
				t.Fatalf("ParseSegment(FormatSegment(%q)) = %#v, %v", m.Enc.FormatSegment(s), got, err)
			}
			for i, f := range s.Fields {
				if s.Name == "MSH" && i < 2 {
					continue // MSH-1 and MSH-2 are not delimited
				}
				got, err := m.Enc.ParseField(m.Enc.FormatField(f))
				if err != nil || !reflect.DeepEqual(got, f) {
					t.Fatalf("ParseField(FormatField(%q)) = %#v, %v", m.Enc.FormatField(f), got, err)
				}
			}
		}
		out := m.String()
		if want := normalise(in); out != want {
			t.Fatalf("String() = %q, want %q", out, want)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("reparse of %q: %v", out, err)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("reparse differs for %q", in)
		}
		for _, s := range m.Segments {
			for _, fl := range s.Fields {
				for _, r := range fl {
					for _, c := range r {
						for _, leaf := range c {
							if got := m.Unescape(m.Escape(leaf)); got != leaf {
								t.Fatalf("Unescape(Escape(%q)) = %q", leaf, got)
							}
						}
					}
				}
			}
		}
		_ = BuildAck(m, "AA").String()
	})
}

// exceeded is the set of limits that a message of n bytes, parsed as m,
// is over, and the number of elements in m.
func exceeded(m *Message, n int, lim Limits) (over map[string]bool, elements int) {
	over = map[string]bool{}
	over["MaxBytes"] = n > lim.MaxBytes
	over["MaxSegments"] = len(m.Segments) > lim.MaxSegments
	for _, s := range m.Segments {
		over["MaxFields"] = over["MaxFields"] || len(s.Fields) > lim.MaxFields
		elements += len(s.Fields)
		for _, f := range s.Fields {
			over["MaxRepetitions"] = over["MaxRepetitions"] || len(f) > lim.MaxRepetitions
			elements += len(f)
			for _, r := range f {
				over["MaxComponents"] = over["MaxComponents"] || len(r) > lim.MaxComponents
				elements += len(r)
				for _, c := range r {
					over["MaxSubcomponents"] = over["MaxSubcomponents"] || len(c) > lim.MaxSubcomponents
					elements += len(c)
				}
			}
		}
	}
	over["MaxElements"] = elements > lim.MaxElements
	for k, v := range over {
		if !v {
			delete(over, k)
		}
	}
	return over, elements
}
