// Package hl7 parses and formats HL7 v2 messages in the ER7 ("pipe-hat")
// encoding: segments separated by carriage returns, fields, repetitions,
// components and subcomponents separated by the characters the message
// declares in MSH-1 and MSH-2, and escape sequences such as \F\.
//
// The tree keeps every leaf as the raw (still escaped) text, so formatting a
// parsed message gives back its input byte for byte, apart from segment
// separators, which are normalised to \r. Callers that want the decoded value
// of a leaf pass it through Encoding.Unescape.
package hl7

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Encoding holds the delimiters a message declares in MSH-1 and MSH-2.
type Encoding struct {
	Field        byte // MSH-1, usually '|'
	Component    byte // MSH-2[0], usually '^'
	Repetition   byte // MSH-2[1], usually '~'
	EscapeChar   byte // MSH-2[2], usually '\'
	Subcomponent byte // MSH-2[3], usually '&'
	// Truncation is the HL7 v2.7 truncation character (an optional fifth
	// MSH-2 character, usually '#'), or 0 when the message declares none.
	Truncation byte
}

// DefaultEncoding is the delimiter set HL7 recommends and nearly every sender uses.
var DefaultEncoding = Encoding{Field: '|', Component: '^', Repetition: '~', EscapeChar: '\\', Subcomponent: '&'}

// MSH2 is the text of MSH-2 for this encoding.
func (e Encoding) MSH2() string {
	b := []byte{e.Component, e.Repetition, e.EscapeChar, e.Subcomponent}
	if e.Truncation != 0 {
		b = append(b, e.Truncation)
	}
	return string(b)
}

// Message is one parsed HL7 v2 message.
type Message struct {
	Segments []*Segment
	Enc      Encoding
}

// Segment is one segment: its three-character name and its fields.
// Fields[i] is HL7 field i+1. In an MSH segment Fields[0] is MSH-1 (the field
// separator) and Fields[1] is MSH-2 (the encoding characters), each kept as a
// single unsplit leaf, so MSH-3 is Fields[2] as the standard numbers it;
// String writes MSH-1 and MSH-2 from the message's Encoding, not from these.
type Segment struct {
	Name   string
	Fields []Field
}

// Field is one field: its repetitions (usually one).
type Field []Repetition

// Repetition is one occurrence of a field: its components.
type Repetition []Component

// Component is one component: its subcomponents, each the raw escaped text.
type Component []string

// ParseError says where a message failed to parse.
type ParseError struct {
	Segment int    // 1-based number of the segment (blank lines are not counted)
	Column  int    // 1-based byte position within that segment
	Offset  int    // 0-based byte offset from the start of the input
	Msg     string // what was wrong
}

// Error says where parsing failed and why.
func (e *ParseError) Error() string {
	return fmt.Sprintf("hl7: segment %d, column %d (offset %d): %s", e.Segment, e.Column, e.Offset, e.Msg)
}

// Parse reads an ER7 message under DefaultLimits. Segments may be separated
// by \r, \n or \r\n; blank lines are skipped, as Medplum's parser does. A
// malformed message is refused with a *ParseError, one over a limit with a
// *LimitError.
func Parse(text string) (*Message, error) {
	return ParseLimited(text, DefaultLimits)
}

// ParseLimited is Parse under other limits; a zero field of lim takes its
// value from DefaultLimits.
func ParseLimited(text string, lim Limits) (*Message, error) {
	lim = lim.orDefaults()
	if len(text) > lim.MaxBytes {
		return nil, &LimitError{Limit: "MaxBytes", Max: lim.MaxBytes}
	}
	if !strings.HasPrefix(text, "MSH") {
		return nil, &ParseError{Segment: 1, Column: 1, Offset: 0, Msg: "message must start with an MSH segment"}
	}
	first := text[:lineEnd(text, 0)]
	enc, perr := readEncoding(first)
	if perr != nil {
		return nil, perr
	}
	p := &parser{enc: enc, lim: lim}
	if err := p.message(text); err != nil {
		return nil, err
	}
	p.allocate()
	if err := p.message(text); err != nil {
		return nil, err // not reached: the counting pass accepted the same text
	}
	return &Message{Enc: enc, Segments: p.segPtrs}, nil
}

// lineEnd is the index of the first \r or \n at or after start, or len(s).
func lineEnd(s string, start int) int {
	if i := strings.IndexAny(s[start:], "\r\n"); i >= 0 {
		return start + i
	}
	return len(s)
}

// readEncoding takes MSH-1 and MSH-2 from the first line of a message.
func readEncoding(line string) (Encoding, *ParseError) {
	fail := func(col int, format string, args ...any) (Encoding, *ParseError) {
		return Encoding{}, &ParseError{Segment: 1, Column: col, Offset: col - 1, Msg: fmt.Sprintf(format, args...)}
	}
	if len(line) < 4 {
		return fail(len(line)+1, "MSH segment too short to carry the encoding characters")
	}
	f := line[3]
	msh2 := line[4:]
	if i := strings.IndexByte(msh2, f); i >= 0 {
		msh2 = msh2[:i]
	}
	if len(msh2) < 4 {
		return fail(5+len(msh2), "MSH-2 must hold 4 encoding characters (component, repetition, escape, subcomponent), found %d", len(msh2))
	}
	if len(msh2) > 5 {
		return fail(10, "MSH-2 holds %d characters; at most 5 encoding characters are allowed", len(msh2))
	}
	chars := line[3 : 4+len(msh2)]
	for i := 0; i < len(chars); i++ {
		c := chars[i]
		if !isDelimiter(c) {
			return fail(4+i, "encoding character %q must be a printable ASCII character that is not a letter, digit or space", c)
		}
		if j := strings.IndexByte(chars[:i], c); j >= 0 {
			return fail(4+i, "encoding character %q is used twice in MSH-1/MSH-2", c)
		}
	}
	e := Encoding{Field: f, Component: msh2[0], Repetition: msh2[1], EscapeChar: msh2[2], Subcomponent: msh2[3]}
	if len(msh2) == 5 {
		e.Truncation = msh2[4]
	}
	return e, nil
}

// isDelimiter reports whether c may serve as an encoding character: a
// visible ASCII character that cannot be confused with segment names or data
// words.
func isDelimiter(c byte) bool {
	return c > ' ' && c < 0x7f && !isAlnum(c)
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// segmentSyntax checks one line and finds its fields: fields is the text
// after the segment name (after MSH-2 in an MSH), to be split at the field
// separator when split is set. Errors carry only the column; the caller
// fills in the segment number and offset.
func (e Encoding) segmentSyntax(line string) (fields string, split bool, perr *ParseError) {
	if i := strings.IndexByte(line, 0); i >= 0 {
		return "", false, &ParseError{Column: i + 1, Msg: "NUL byte in message"}
	}
	if len(line) < 3 {
		return "", false, &ParseError{Column: 1, Msg: fmt.Sprintf("segment name %q is not three characters", line)}
	}
	for i := 0; i < 3; i++ {
		if c := line[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return "", false, &ParseError{Column: i + 1, Msg: fmt.Sprintf("segment name %q must be three upper-case letters or digits", line[:3])}
		}
	}
	if len(line) > 3 && line[3] != e.Field {
		return "", false, &ParseError{Column: 4, Msg: fmt.Sprintf("expected field separator %q after segment name, found %q", e.Field, line[3])}
	}
	rest := line[min(len(line), 4):]
	if line[:3] == "MSH" {
		// MSH-1 and MSH-2 are not delimited like other fields: they are the
		// delimiters. A later MSH (a second message glued on) must declare
		// the same ones, or its fields would be split wrongly.
		msh2 := e.MSH2()
		if len(line) < 4 || !strings.HasPrefix(rest, msh2) || len(rest) > len(msh2) && rest[len(msh2)] != e.Field {
			return "", false, &ParseError{Column: 4, Msg: fmt.Sprintf("MSH must declare the message's encoding characters %q", string(e.Field)+msh2)}
		}
		rest = rest[len(msh2):]
		if rest == "" {
			return "", false, nil
		}
		return rest[1:], true, nil
	}
	return rest, len(line) > 3, nil
}

// leaf is a field holding one unsplit text.
func leaf(text string) Field { return Field{Repetition{Component{text}}} }

// String formats the message as ER7 with \r between segments (no trailing
// \r). For a parsed message it equals the input with every run of \r and \n
// replaced by a single \r and leading or trailing separators removed.
func (m *Message) String() string {
	var b strings.Builder
	for i, s := range m.Segments {
		if i > 0 {
			b.WriteByte('\r')
		}
		m.Enc.writeSegment(&b, s)
	}
	return b.String()
}

// FormatSegment formats one segment as ER7.
func (e Encoding) FormatSegment(s *Segment) string {
	var b strings.Builder
	e.writeSegment(&b, s)
	return b.String()
}

// FormatField formats one field as ER7.
func (e Encoding) FormatField(f Field) string {
	var b strings.Builder
	e.writeField(&b, f)
	return b.String()
}

// FormatComponent formats one component (its subcomponents joined) as ER7.
func (e Encoding) FormatComponent(c Component) string {
	return strings.Join(c, string(e.Subcomponent))
}

func (e Encoding) writeSegment(b *strings.Builder, s *Segment) {
	b.WriteString(s.Name)
	fields := s.Fields
	if s.Name == "MSH" {
		b.WriteByte(e.Field)
		b.WriteString(e.MSH2())
		if len(fields) < 2 {
			return
		}
		fields = fields[2:]
	}
	for _, f := range fields {
		b.WriteByte(e.Field)
		e.writeField(b, f)
	}
}

func (e Encoding) writeField(b *strings.Builder, f Field) {
	for i, r := range f {
		if i > 0 {
			b.WriteByte(e.Repetition)
		}
		for j, c := range r {
			if j > 0 {
				b.WriteByte(e.Component)
			}
			for k, sub := range c {
				if k > 0 {
					b.WriteByte(e.Subcomponent)
				}
				b.WriteString(sub)
			}
		}
	}
}

// Header is the first segment (the MSH of a parsed message), or nil.
func (m *Message) Header() *Segment {
	if len(m.Segments) == 0 {
		return nil
	}
	return m.Segments[0]
}

// Get is the first segment with the given name, or nil.
func (m *Message) Get(name string) *Segment {
	for _, s := range m.Segments {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// GetAll is every segment with the given name, in message order.
func (m *Message) GetAll(name string) []*Segment {
	var out []*Segment
	for _, s := range m.Segments {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Field is HL7 field i of the segment (1-based; in MSH, field 1 is the field
// separator), or nil when the segment has fewer fields.
func (s *Segment) Field(i int) Field {
	if s == nil || i < 1 || i > len(s.Fields) {
		return nil
	}
	return s.Fields[i-1]
}

// Component is the raw (escaped) text of one subcomponent: field, component,
// subcomponent and repetition are all 1-based, as in "PID-5.1"; a component,
// subcomponent or repetition number below 1 is read as 1. Anything absent is "".
func (s *Segment) Component(field, comp, sub, rep int) string {
	f := s.Field(field)
	rep, comp, sub = max(rep, 1), max(comp, 1), max(sub, 1)
	if rep > len(f) {
		return ""
	}
	r := f[rep-1]
	if comp > len(r) {
		return ""
	}
	c := r[comp-1]
	if sub > len(c) {
		return ""
	}
	return c[sub-1]
}

// Unescape decodes the escape sequences of one leaf: \F\ \S\ \T\ \R\ \E\
// (and \P\ when a truncation character is declared) become the delimiters
// they stand for, \Xhh..\ becomes the bytes it spells in hex. Formatting
// sequences (\.br\, \H\, \N\, ...) and malformed sequences are kept verbatim,
// since they carry meaning for a display and are not delimiters.
func (e Encoding) Unescape(s string) string {
	if strings.IndexByte(s, e.EscapeChar) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != e.EscapeChar {
			b.WriteByte(c)
			i++
			continue
		}
		j := strings.IndexByte(s[i+1:], e.EscapeChar)
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		seq := s[i+1 : i+1+j]
		if out, ok := e.decodeEscape(seq); ok {
			b.WriteString(out)
		} else {
			b.WriteString(s[i : i+j+2])
		}
		i += j + 2
	}
	return b.String()
}

func (e Encoding) decodeEscape(seq string) (string, bool) {
	switch seq {
	case "F":
		return string(e.Field), true
	case "S":
		return string(e.Component), true
	case "T":
		return string(e.Subcomponent), true
	case "R":
		return string(e.Repetition), true
	case "E":
		return string(e.EscapeChar), true
	case "P":
		if e.Truncation != 0 {
			return string(e.Truncation), true
		}
		return "", false
	}
	if len(seq) < 3 || seq[0] != 'X' || len(seq)%2 == 0 {
		return "", false
	}
	hex := seq[1:]
	out := make([]byte, len(hex)/2)
	for k := range out {
		v, err := strconv.ParseUint(hex[2*k:2*k+2], 16, 8)
		if err != nil {
			return "", false
		}
		out[k] = byte(v)
	}
	return string(out), true
}

// Escape encodes text so that it can be placed in one leaf: delimiters become
// \F\ \S\ \T\ \R\ \E\ (\P\), and carriage return and line feed, which would
// end the segment, become \X0D\ and \X0A\. Unescape(Escape(s)) == s.
func (e Encoding) Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		var code string
		switch {
		case c == e.EscapeChar:
			code = "E"
		case c == e.Field:
			code = "F"
		case c == e.Component:
			code = "S"
		case c == e.Subcomponent:
			code = "T"
		case c == e.Repetition:
			code = "R"
		case e.Truncation != 0 && c == e.Truncation:
			code = "P"
		case c == '\r':
			code = "X0D"
		case c == '\n':
			code = "X0A"
		default:
			b.WriteByte(c)
			continue
		}
		b.WriteByte(e.EscapeChar)
		b.WriteString(code)
		b.WriteByte(e.EscapeChar)
	}
	return b.String()
}

// ackText is the MSA-3 text Medplum writes for each acknowledgement code.
var ackText = map[string]string{
	"AA": "OK",
	"AE": "Application Error",
	"AR": "Application Reject",
	"CA": "Commit Accept",
	"CE": "Commit Error",
	"CR": "Commit Reject",
}

// now is the clock BuildAck reads; tests replace it.
var now = time.Now

// BuildAck builds the acknowledgement of m the way Medplum's
// Hl7Message.buildAck does: an MSH with sender and receiver swapped, the
// original trigger event mirrored in MSH-9, and MSA|<code>|<MSH-10 of m>|<text>.
// An empty code means "AA".
func BuildAck(m *Message, code string) *Message {
	if code == "" {
		code = "AA"
	}
	msh := m.Get("MSH")
	copyField := func(i int) Field {
		f := msh.Field(i)
		if f == nil {
			return leaf("")
		}
		return cloneField(f)
	}
	version := leaf("2.5.1")
	if msh.Field(12) != nil {
		version = copyField(12)
	}
	// The shape of MSH-9 differs between HL7 versions; mirroring the
	// original's shape, as Medplum does, answers each sender in its own.
	ackType := Component{"ACK"}
	msgType := Repetition{ackType}
	if trigger := msh.Component(9, 2, 1, 1); trigger != "" {
		msgType = append(msgType, Component{trigger})
		if msh.Component(9, 3, 1, 1) != "" {
			msgType = append(msgType, Component{"ACK"})
		}
	}
	t := now().UTC()
	enc := m.Enc
	if enc.Field == 0 {
		enc = DefaultEncoding
	}
	text := ackText[code]
	return &Message{Enc: enc, Segments: []*Segment{
		{Name: "MSH", Fields: []Field{
			leaf(string(enc.Field)), leaf(enc.MSH2()),
			copyField(5), copyField(6), copyField(3), copyField(4),
			leaf(t.Format("20060102150405")), leaf(""),
			{msgType},
			leaf(strconv.FormatInt(t.UnixMilli(), 10)),
			leaf("P"),
			version,
		}},
		{Name: "MSA", Fields: []Field{leaf(code), copyField(10), leaf(enc.Escape(text))}},
	}}
}

func cloneField(f Field) Field {
	out := make(Field, len(f))
	for i, r := range f {
		out[i] = make(Repetition, len(r))
		for j, c := range r {
			out[i][j] = append(Component(nil), c...)
		}
	}
	return out
}

// Escape encodes text for a leaf of this message (see Encoding.Escape).
func (m *Message) Escape(s string) string { return m.Enc.Escape(s) }

// Unescape decodes a leaf of this message (see Encoding.Unescape).
func (m *Message) Unescape(s string) string { return m.Enc.Unescape(s) }
