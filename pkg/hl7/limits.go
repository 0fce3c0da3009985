package hl7

import "fmt"

// Limits bound what one parse may build. A parsed message is a tree of
// fields, repetitions, components and subcomponents, and every node costs
// memory here and again when a caller converts the tree node by node (the
// bot executor makes one JavaScript value per field, repetition and
// component). A delimiter is one byte of input but a new node, so without
// limits a small input becomes a very large tree: a megabyte of '|' is a
// million fields. Parse counts the nodes as it reads and refuses an input
// over a limit, with a *LimitError, before allocating the tree.
//
// A field of Limits that is zero or negative takes its value from
// DefaultLimits; set a field to math.MaxInt to lift that limit.
type Limits struct {
	MaxBytes         int // length of the ER7 text
	MaxSegments      int // segments in a message; blank lines are not segments
	MaxFields        int // fields in one segment; in MSH, MSH-1 and MSH-2 count
	MaxRepetitions   int // repetitions in one field
	MaxComponents    int // components in one repetition
	MaxSubcomponents int // subcomponents in one component
	// MaxElements bounds the whole tree: fields + repetitions + components +
	// subcomponents in the message (in the segment or field, for
	// ParseSegment and ParseField). It is the limit that bounds the memory of
	// a parse and the cost of converting its result; the others bound one
	// level each and name the place an input went wrong.
	MaxElements int
}

// DefaultLimits are the limits Parse, ParseSegment and ParseField apply.
// They accept the largest messages seen in practice and keep the memory of
// a parse under about 25 MB, whatever the input:
//
//   - MaxBytes is the 8 MiB request body limit: an ORU carrying a base64 PDF
//     of several MB in one OBX-5 is one leaf, which costs nothing beyond its
//     bytes (leaves are substrings of the input), so no leaf limit is needed.
//   - MaxSegments: results with thousands of OBX segments (and an NTE after
//     many of them) occur; 50,000 is ten times the 5,000-OBX test message.
//   - MaxFields: the longest standard segments (PV1, IN1, OBR) have about 55
//     fields, and Z-segments rarely pass 100.
//   - MaxRepetitions, MaxComponents: waveform data (the NA and MA types)
//     carries one sample per component and one sample set per repetition:
//     a 60 s strip at 500 Hz is 30,000 repetitions; 100,000 leaves room.
//   - MaxSubcomponents: the deepest standard types (XCN, XON inside a
//     component) have about 25 parts.
//   - MaxElements: a fully populated US-realm lab OBX (with OBX-23 to -25)
//     is about 190 elements in 400 bytes, a plain OBX about 50 in 60 bytes,
//     so a million elements is 5,000 of the former or 20,000 of the
//     latter. Measured (TestParseMemory): parsing costs 24 bytes per field,
//     repetition and component, 16 per subcomponent and 56 per segment, so
//     at most about 25 MB (24.3 MB for the largest tree allowed); converting
//     to JavaScript arrays costs 200 to 300 bytes per element in goja, so at
//     most about 300 MB. Before these limits a megabyte of '|' allocated
//     245 MB to parse.
var DefaultLimits = Limits{
	MaxBytes:         8 << 20,
	MaxSegments:      50_000,
	MaxFields:        1_000,
	MaxRepetitions:   100_000,
	MaxComponents:    100_000,
	MaxSubcomponents: 1_000,
	MaxElements:      1_000_000,
}

// orDefaults fills the unset fields of l from DefaultLimits.
func (l Limits) orDefaults() Limits {
	pick := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	d := DefaultLimits
	return Limits{
		MaxBytes:         pick(l.MaxBytes, d.MaxBytes),
		MaxSegments:      pick(l.MaxSegments, d.MaxSegments),
		MaxFields:        pick(l.MaxFields, d.MaxFields),
		MaxRepetitions:   pick(l.MaxRepetitions, d.MaxRepetitions),
		MaxComponents:    pick(l.MaxComponents, d.MaxComponents),
		MaxSubcomponents: pick(l.MaxSubcomponents, d.MaxSubcomponents),
		MaxElements:      pick(l.MaxElements, d.MaxElements),
	}
}

// LimitError says that an input is over one of the Limits it was parsed
// under. It is not a syntax error (that is *ParseError): the input may be
// well-formed HL7 that is too large to accept, which an HTTP server answers
// with 413 rather than 400.
type LimitError struct {
	Limit   string // the field of Limits that was exceeded, e.g. "MaxFields"
	Max     int    // its value
	Segment int    // 1-based number of the segment where it was exceeded, or 0
	Name    string // that segment's name, or ""
	Field   int    // HL7 number of the field where it was exceeded, or 0
}

// Error says which limit was exceeded, its value and where.
func (e *LimitError) Error() string {
	switch e.Limit {
	case "MaxBytes":
		return fmt.Sprintf("hl7: more than %d bytes", e.Max)
	case "MaxSegments":
		return fmt.Sprintf("hl7: more than %d segments in message", e.Max)
	case "MaxFields":
		return fmt.Sprintf("hl7: more than %d fields in %s", e.Max, e.segment())
	case "MaxRepetitions":
		return fmt.Sprintf("hl7: more than %d repetitions in %s", e.Max, e.field())
	case "MaxComponents":
		return fmt.Sprintf("hl7: more than %d components in a repetition of %s", e.Max, e.field())
	case "MaxSubcomponents":
		return fmt.Sprintf("hl7: more than %d subcomponents in a component of %s", e.Max, e.field())
	case "MaxElements":
		s := fmt.Sprintf("hl7: more than %d elements (fields, repetitions, components and subcomponents)", e.Max)
		if e.Segment > 0 {
			s += ", reached in " + e.field()
		}
		return s
	}
	return fmt.Sprintf("hl7: over the limit %s = %d", e.Limit, e.Max)
}

// segment names the segment, as "segment 3 (OBX)".
func (e *LimitError) segment() string {
	if e.Segment == 0 {
		return "segment"
	}
	return fmt.Sprintf("segment %d (%s)", e.Segment, e.Name)
}

// field names the field, as "field OBX-5 (segment 3)".
func (e *LimitError) field() string {
	switch {
	case e.Segment == 0:
		return "field"
	case e.Field == 0:
		return e.segment()
	}
	return fmt.Sprintf("field %s-%d (segment %d)", e.Name, e.Field, e.Segment)
}
