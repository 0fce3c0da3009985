package hl7

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

const mib = 1 << 20

// labOBX is a fully populated US-realm lab result (LRI): coded test and
// units with alternates, and the performing lab's name, address and
// director in OBX-23 to OBX-25. At about 190 elements in 400 bytes it is as
// dense as real results get.
func labOBX(i int) string {
	return fmt.Sprintf("OBX|%d|NM|2345-7^Glucose [Mass/volume] in Serum or Plasma^LN^GLU^Glucose^L^2.68^v1||95|"+
		"mg/dL^milligrams per deciliter^UCUM^mg/dL^mg/dL^L^1.9^v1|70-105|N|||F|||20240101120000-0500|||||20240101120500-0500||||"+
		"Main Street Lab^D^^^^CLIA&2.16.840.1.113883.4.7&ISO^XX^^^01D1234567|123 Main St^Suite 100^Ann Arbor^MI^48104^USA^B|"+
		"1234567890^Director^Lab^Q^^Dr^^^NPI&2.16.840.1.113883.4.6&ISO^^^^NPI", i)
}

const oruHeader = "MSH|^~\\&|LAB|HOSP|EHR|HOSP|20240101120000||ORU^R01^ORU_R01|MSG1|P|2.5.1\r" +
	"PID|1||12345^^^HOSP^MR||DOE^JANE^Q||19700101|F\r" +
	"OBR|1|ORD1|FIL1|24323-8^Comprehensive metabolic panel^LN|||20240101110000"

// labResults is an ORU with n lab OBX segments.
func labResults(n int) string {
	var b strings.Builder
	b.WriteString(oruHeader)
	for i := 1; i <= n; i++ {
		b.WriteString("\r")
		b.WriteString(labOBX(i))
	}
	return b.String()
}

// labResultsOfSize is an ORU of lab OBX segments at least n bytes long.
func labResultsOfSize(n int) string {
	var b strings.Builder
	b.WriteString(oruHeader)
	for i := 1; b.Len() < n; i++ {
		b.WriteString("\r")
		b.WriteString(labOBX(i))
	}
	return b.String()
}

func TestParseRefusesOverLimit(t *testing.T) {
	const msh = "MSH|^~\\&|A\r"
	// Each OBX below has 999 empty fields (3,996 elements); with the 12 of
	// the MSH, 250 of them make 999,012, and the 251st (segment 252) passes
	// 1,000,000 at its field 248.
	spread := msh + strings.Repeat("OBX"+strings.Repeat("|", 999)+"\r", 260)
	tests := []struct {
		name  string
		parse func() error
		limit string
		want  string // the whole Error()
	}{
		{"1 MB of | in one segment", parse(msh + "OBX|" + strings.Repeat("|", mib)),
			"MaxFields", "hl7: more than 1000 fields in segment 2 (OBX)"},
		{"1 MB of ~ in one field", parse(msh + "OBX|1|TX|||" + strings.Repeat("~", mib)),
			"MaxRepetitions", "hl7: more than 100000 repetitions in field OBX-5 (segment 2)"},
		{"1 MB of ^ in one field", parse(msh + "OBX|1|TX|||" + strings.Repeat("^", mib)),
			"MaxComponents", "hl7: more than 100000 components in a repetition of field OBX-5 (segment 2)"},
		{"1 MB of & in one field", parse(msh + "OBX|1|TX|||" + strings.Repeat("&", mib)),
			"MaxSubcomponents", "hl7: more than 1000 subcomponents in a component of field OBX-5 (segment 2)"},
		{"1 MB of | in MSH", parse("MSH|^~\\&" + strings.Repeat("|", mib)),
			"MaxFields", "hl7: more than 1000 fields in segment 1 (MSH)"},
		{"1 MB of empty segments", parse(msh + strings.Repeat("NTE\r", mib/4)),
			"MaxSegments", "hl7: more than 50000 segments in message"},
		{"1 MB of fields spread over segments", parse(spread),
			"MaxElements", "hl7: more than 1000000 elements (fields, repetitions, components and subcomponents), reached in field OBX-248 (segment 252)"},
		{"dense lab results of 2.5 MB", parse(labResultsOfSize(5 * mib / 2)),
			"MaxElements", ""},
		{"more than 8 MiB", parse(msh + "OBX|1|ED|PDF^^^^Base64|" + strings.Repeat("QUJD", 2*mib+1)),
			"MaxBytes", "hl7: more than 8388608 bytes"},
		{"ParseSegment, 1 MB of |", func() error { _, err := DefaultEncoding.ParseSegment("OBX|" + strings.Repeat("|", mib)); return err },
			"MaxFields", "hl7: more than 1000 fields in segment 1 (OBX)"},
		{"ParseSegment, 1 MB of ~", func() error { _, err := DefaultEncoding.ParseSegment("OBX|1|" + strings.Repeat("~", mib)); return err },
			"MaxRepetitions", "hl7: more than 100000 repetitions in field OBX-2 (segment 1)"},
		{"ParseSegment, more than 8 MiB", func() error { _, err := DefaultEncoding.ParseSegment(strings.Repeat("A", 8*mib+1)); return err },
			"MaxBytes", "hl7: more than 8388608 bytes"},
		{"ParseField, 1 MB of ~", func() error { _, err := DefaultEncoding.ParseField(strings.Repeat("~", mib)); return err },
			"MaxRepetitions", "hl7: more than 100000 repetitions in field"},
		{"ParseField, 1 MB of ^", func() error { _, err := DefaultEncoding.ParseField(strings.Repeat("^", mib)); return err },
			"MaxComponents", "hl7: more than 100000 components in a repetition of field"},
		{"ParseField, 1 MB of &", func() error { _, err := DefaultEncoding.ParseField(strings.Repeat("&", mib)); return err },
			"MaxSubcomponents", "hl7: more than 1000 subcomponents in a component of field"},
		{"ParseField, many elements", func() error {
			_, err := DefaultEncoding.ParseField(strings.Repeat(strings.Repeat("^", 999)+"~", 600))
			return err
		}, "MaxElements", "hl7: more than 1000000 elements (fields, repetitions, components and subcomponents)"},
		{"ParseField, more than 8 MiB", func() error { _, err := DefaultEncoding.ParseField(strings.Repeat("A", 8*mib+1)); return err },
			"MaxBytes", "hl7: more than 8388608 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse()
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v, want *LimitError", err)
			}
			if errors.As(err, new(*ParseError)) {
				t.Error("a limit error is also a *ParseError")
			}
			if le.Limit != tt.limit {
				t.Errorf("Limit = %q, want %q", le.Limit, tt.limit)
			}
			if tt.want != "" && err.Error() != tt.want {
				t.Errorf("Error() = %q\n           want %q", err.Error(), tt.want)
			}
		})
	}
}

// parse is a test case that parses text under DefaultLimits.
func parse(text string) func() error {
	return func() error { _, err := Parse(text); return err }
}

// TestLimitsBoundaries checks each limit one below, at and one past its
// value: the limit is the largest count accepted.
func TestLimitsBoundaries(t *testing.T) {
	const msh = "MSH|^~\\&|A\r" // 3 fields, 12 elements
	tests := []struct {
		name  string
		lim   Limits
		at    string // exactly at the limit: accepted
		over  string // one more: refused
		limit string
		want  string
	}{
		{"bytes", Limits{MaxBytes: 16}, msh + "PID|1", msh + "PID|12", "MaxBytes", "hl7: more than 16 bytes"},
		{"segments", Limits{MaxSegments: 3}, msh + "PID\rPV1", msh + "PID\rPV1\rOBX", "MaxSegments", "hl7: more than 3 segments in message"},
		{"fields", Limits{MaxFields: 3}, msh + "PID|a|b|c", msh + "PID|a|b|c|d", "MaxFields", "hl7: more than 3 fields in segment 2 (PID)"},
		{"fields in MSH", Limits{MaxFields: 4}, "MSH|^~\\&|a|b", "MSH|^~\\&|a|b|c", "MaxFields", "hl7: more than 4 fields in segment 1 (MSH)"},
		{"repetitions", Limits{MaxRepetitions: 2}, msh + "PID||a~b", msh + "PID||a~b~c", "MaxRepetitions", "hl7: more than 2 repetitions in field PID-2 (segment 2)"},
		{"components", Limits{MaxComponents: 2}, msh + "PID|a^b~c^d", msh + "PID|a^b~c^d^e", "MaxComponents", "hl7: more than 2 components in a repetition of field PID-1 (segment 2)"},
		{"subcomponents", Limits{MaxSubcomponents: 2}, msh + "PID|a&b^c&d", msh + "PID|a&b^c&d&e", "MaxSubcomponents", "hl7: more than 2 subcomponents in a component of field PID-1 (segment 2)"},
		// 12 in MSH, then PID-1: 1 field + 1 repetition + 2 components + 4 or 5 subcomponents.
		{"elements", Limits{MaxElements: 20}, msh + "PID|a&b^c&d", msh + "PID|a&b^c&d&e", "MaxElements", "hl7: more than 20 elements (fields, repetitions, components and subcomponents), reached in field PID-1 (segment 2)"},
		{"elements in MSH", Limits{MaxElements: 8}, "MSH|^~\\&", "MSH|^~\\&|", "MaxElements", "hl7: more than 8 elements (fields, repetitions, components and subcomponents), reached in field MSH-3 (segment 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseLimited(tt.at, tt.lim)
			if err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			if want, _ := Parse(tt.at); !reflect.DeepEqual(m, want) {
				t.Errorf("ParseLimited and Parse differ")
			}
			_, err = ParseLimited(tt.over, tt.lim)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != tt.limit || err.Error() != tt.want {
				t.Errorf("over the limit: err = %v, want %s: %q", err, tt.limit, tt.want)
			}
			if _, err := Parse(tt.over); err != nil {
				t.Errorf("DefaultLimits refuse %q: %v", tt.over, err)
			}
		})
	}
}

func TestParseAcceptsLargeRealMessages(t *testing.T) {
	pdf := strings.Repeat("JVBERi0xLjQK", 6*mib/12) // 6 MiB of base64
	tests := []struct {
		name     string
		in       string
		segments int
	}{
		{"5,000 lab results and a 6 MiB PDF", labResults(5000) + "\rOBX|5001|ED|PDF^Report^L||^AP^PDF^Base64^" + pdf + "||||||F", 5004},
		// A 10 s 12-lead ECG at 500 Hz in a multiplexed array: a sample set
		// per repetition, a lead per component.
		{"waveform of 5,000 sample sets", oruHeader + "\rOBX|1|MA|ECG^12-lead^L||" +
			strings.TrimSuffix(strings.Repeat("12^-3^45^6^7^-80^9^10^11^-12^13^14~", 5000), "~") + "||||||F", 4},
		{"segments of 1,000 fields", msh1000(), 2},
		{"50,000 segments", "MSH|^~\\&|A" + strings.Repeat("\rNTE|1||note", 49_999), 50_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Segments) != tt.segments {
				t.Errorf("segments = %d, want %d", len(m.Segments), tt.segments)
			}
			if m.String() != tt.in {
				t.Error("String() differs from the input")
			}
			over, elements := exceeded(m, len(tt.in), DefaultLimits)
			if len(over) > 0 {
				t.Errorf("accepted over limits %v", over)
			}
			t.Logf("%d bytes, %d elements", len(tt.in), elements)
		})
	}
}

func msh1000() string {
	return "MSH|^~\\&" + strings.Repeat("|x", 998) + "\rZPD" + strings.Repeat("|y", 1000)
}

// TestParseMemory measures what one Parse allocates. A hostile input is
// refused by the counting pass, which allocates nothing but the error. An
// accepted one allocates the tree once, at its exact size: 24 bytes per
// field, repetition and component, 16 per subcomponent and 56 per segment
// (TotalAlloc below, go1.26 amd64). Under DefaultLimits the largest tree is
// about 25 MB, whatever the input; before these limits, a megabyte of '|'
// allocated 245 MB and a megabyte of lab results 20 MB.
func TestParseMemory(t *testing.T) {
	const msh = "MSH|^~\\&|A\r"
	largest := msh + strings.Repeat("OBX"+strings.Repeat("|", 999)+"\r", 249) + // 249 × 3,996 elements
		strings.Repeat("NTE\r", 49_000) // and segments, up to the limits
	tests := []struct {
		name    string
		in      string
		refused bool
		max     uint64 // bytes allocated by one Parse
	}{
		{"1 MB of |", msh + "OBX|" + strings.Repeat("|", mib), true, 1 << 10},
		{"1 MB of ~", msh + "OBX|" + strings.Repeat("~", mib), true, 1 << 10},
		{"1 MB of ^", msh + "OBX|" + strings.Repeat("^", mib), true, 1 << 10},
		{"1 MB of &", msh + "OBX|" + strings.Repeat("&", mib), true, 1 << 10},
		{"1 MB of segments", msh + strings.Repeat("NTE\r", mib/4), true, 1 << 10},
		{"1 MB of fields over segments", msh + strings.Repeat("OBX"+strings.Repeat("|", 999)+"\r", mib/1004), true, 1 << 10},
		{"the largest tree the limits allow", largest, false, 25 << 20},
		{"1 MB of lab results", labResultsOfSize(mib), false, 12 * mib}, // measured 10.1 MB
		{"6 MiB base64 leaf", msh + "OBX|1|ED|PDF^^^^Base64|" + strings.Repeat("QUJD", 6*mib/4), false, 2 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() { _, err = Parse(tt.in) })
			if refused := err != nil; refused != tt.refused {
				t.Fatalf("refused = %v (%v), want %v", refused, err, tt.refused)
			}
			t.Logf("%d bytes in, %d allocated (%.1f per byte)", len(tt.in), alloc, float64(alloc)/float64(len(tt.in)))
			if alloc > tt.max {
				t.Errorf("allocated %d bytes, want at most %d", alloc, tt.max)
			}
		})
	}
}

// allocated is the number of bytes f allocates: the least of three runs,
// on one processor as testing.AllocsPerRun measures, since the count is
// the whole process's and another goroutine may allocate meanwhile (CI
// once saw 5 KB more than a run of Parse allocates).
func allocated(f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestNodesAreCapped checks that the nodes, windows of shared slabs, cannot
// reach each other: appending to one reallocates.
func TestNodesAreCapped(t *testing.T) {
	m, err := Parse("MSH|^~\\&|A\rPID|a&b^c~d|e")
	if err != nil {
		t.Fatal(err)
	}
	pid := m.Get("PID")
	pid.Fields[0][0][0] = append(pid.Fields[0][0][0], "x")
	pid.Fields[0][0] = append(pid.Fields[0][0], Component{"y"})
	pid.Fields[0] = append(pid.Fields[0], Repetition{{"z"}})
	m.Header().Fields = append(m.Header().Fields, Field{{{"w"}}})
	if got, want := m.String(), "MSH|^~\\&|A|w\rPID|a&b&x^c^y~d~z|e"; got != want {
		t.Errorf("after appends: %q, want %q", got, want)
	}
}

func TestParseFieldAndSegment(t *testing.T) {
	f, err := DefaultEncoding.ParseField("a&b^c~d|e")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Field{{{"a", "b"}, {"c"}}, {{"d|e"}}}); !reflect.DeepEqual(f, want) {
		t.Errorf("ParseField = %#v, want %#v", f, want)
	}
	s, err := DefaultEncoding.ParseSegment("MSH|^~\\&|A^B")
	if err != nil {
		t.Fatal(err)
	}
	if want := (&Segment{Name: "MSH", Fields: []Field{leaf("|"), leaf("^~\\&"), {{{"A"}, {"B"}}}}}); !reflect.DeepEqual(s, want) {
		t.Errorf("ParseSegment = %#v, want %#v", s, want)
	}
	_, err = DefaultEncoding.ParseSegment("pid|1")
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Segment != 1 || pe.Offset != 0 {
		t.Errorf("ParseSegment(bad name) = %v, want a *ParseError at segment 1, offset 0", err)
	}
}

func BenchmarkParse(b *testing.B) {
	for _, bb := range []struct{ name, in string }{
		{"lab results 1 MB", labResultsOfSize(mib)},
		{"base64 leaf 6 MiB", "MSH|^~\\&|A\rOBX|1|ED|PDF^^^^Base64|" + strings.Repeat("QUJD", 6*mib/4)},
		{"refused 1 MB of |", "MSH|^~\\&|A\rOBX|" + strings.Repeat("|", mib)},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.in)))
			for b.Loop() {
				_, _ = Parse(bb.in)
			}
		})
	}
}
