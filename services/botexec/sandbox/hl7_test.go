package sandbox

import (
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/hl7"
)

// The HL7 classes beyond reading a message: other delimiters, editing, and
// what they refuse.
func TestHL7Editing(t *testing.T) {
	custom := `Hl7Message.parse('MSH#!@$%#A#B\rPID#1##x!y@z%w')`
	runExprs(t, []exprCase{
		{"other delimiters: context", `(() => { const c = ` + custom + `.context; return [c.fieldSeparator, c.componentSeparator, c.repetitionSeparator, c.escapeCharacter, c.subcomponentSeparator].join(' ') })()`, "# ! @ $ %"},
		{"other delimiters: component", custom + `.get('PID').getComponent(3, 2)`, "y"},
		{"other delimiters: repetition", custom + `.get('PID').getComponent(3, 1, undefined, 1)`, "z%w"},
		{"other delimiters: subcomponent", custom + `.get('PID').getComponent(3, 1, 1, 1)`, "w"},
		{"other delimiters: round trip", custom + `.toString()`, "MSH#!@$%#A#B\rPID#1##x!y@z%w"},
		{"a truncation character", `Hl7Message.parse('MSH|^~\\&#|A').context.getMsh2()`, "^~\\&#"},
		{"missing subcomponent", `Hl7Field.parse('a&b').getComponent(1, 5)`, ""},
		{"missing component", `Hl7Field.parse('a^b').getComponent(7)`, ""},
		{"missing repetition", `Hl7Field.parse('a').getComponent(1, undefined, 3)`, ""},
		{"missing field", `Hl7Segment.parse('PID|1').getComponent(9, 1)`, ""},
		{"set a subcomponent past the end", `(() => { const f = Hl7Field.parse('a&b'); f.setComponent(1, 'c', 3); return f.toString() })()`, "a&b&&c"},
		{"set a component in a new repetition", `(() => { const f = Hl7Field.parse('a'); f.setComponent(2, 'x', undefined, 2); return f.toString() })()`, "a~~^x"},
		{"component 0 is refused", `Hl7Field.parse('a').setComponent(0, 'x')`, "false"},
		{"a negative subcomponent is refused", `Hl7Field.parse('a').setComponent(1, 'x', -1)`, "false"},
		{"a subcomponent past 1000", tryExpr(`Hl7Field.parse('a').setComponent(1, 'x', 1001)`), "TypeError: subcomponent index out of range"},
		{"values become text", `new Hl7Field([[1, null, true, 1.5]]).toString()`, "1^^true^1.5"},
		{"repetitions given as strings", `new Hl7Field(['a', 'b']).toString()`, "a~b"},
		{"set a missing field of a segment", `Hl7Segment.parse('PID|1').setComponent(9, 1, 'x')`, "false"},
		{"MSH-1 and MSH-2 cannot be set", `(() => { const h = Hl7Message.parse('MSH|^~\\&|A').header; return [h.setField(1, 'x'), h.setField(2, 'x'), h.setField(3, 'B'), h.toString()].join() })()`, "false,false,true,MSH|^~\\&|B"},
		{"setField past the end pads", `(() => { const s = Hl7Segment.parse('ZZZ|1'); s.setField(4, 'x^y'); return s.toString() })()`, "ZZZ|1|||x^y"},
		{"MSH fields from the bot are replaced by the delimiters", `new Hl7Segment(['MSH', 'not delimiters', 'A']).toString()`, "MSH|^~\\&|A"},
		{"setSegment by name", `(() => { const m = Hl7Message.parse('MSH|^~\\&|A\rPID|1'); return [m.setSegment('PID', Hl7Segment.parse('PID|2')), m.toString()].join() })()`, "true,MSH|^~\\&|A\rPID|2"},
		{"setSegment past the end appends", `(() => { const m = Hl7Message.parse('MSH|^~\\&|A'); return [m.setSegment(5, Hl7Segment.parse('NTE|1')), m.segments.length].join() })()`, "true,2"},
		{"setSegment of a missing name", `Hl7Message.parse('MSH|^~\\&|A').setSegment('PID', Hl7Segment.parse('PID|1'))`, "false"},
		{"the header stays MSH", `(() => { const m = Hl7Message.parse('MSH|^~\\&|A\rPID|1'); return [m.setSegment(0, Hl7Segment.parse('PID|2')), m.setSegment(1, Hl7Segment.parse('MSH|^~\\&|B'))].join() })()`, "false,false"},
		{"an ack with an ERR segment", `(() => { const a = Hl7Message.parse('MSH|^~\\&|A|B|C|D|||ADT^A01|42|P|2.5').buildAck({ackCode: 'AR', errSegment: Hl7Segment.parse('ERR|||207')}); return a.segments.map(s => s.name).join() + ' ' + a.get('MSA').toString() })()`, "MSH,MSA,ERR MSA|AR|42|Application Reject"},
		{"a field over pkg/hl7's limits", tryExpr(`Hl7Field.parse('&'.repeat(2000))`), "GoError: " + hl7FieldErr(t, strings.Repeat("&", 2000))},
		{"an emptied segment", tryExpr(`Object.assign(new Hl7Segment(['ZZZ']), {fields: []}).toString()`), "TypeError: an HL7 segment must be a non-empty array of fields"},
		{"delimiters that are not", tryExpr(`new Hl7Field([['a']], new Hl7Context('\r', '|', '|')).toString()`), `TypeError: invalid HL7 encoding characters "||~\\&"`},
		{"parse in a bot refuses what pkg/hl7 refuses", tryExpr(`Hl7Message.parse('MSH|^~')`), "GoError: " + hl7Err(t, "MSH|^~")},
	})
}

// hl7Err is pkg/hl7's refusal of a message: the bot sees its words.
func hl7Err(t *testing.T, text string) string {
	t.Helper()
	_, err := hl7.Parse(text)
	if err == nil {
		t.Fatalf("pkg/hl7 accepts %q", text)
	}
	return err.Error()
}

// hl7FieldErr is pkg/hl7's refusal of one field under the usual delimiters.
func hl7FieldErr(t *testing.T, text string) string {
	t.Helper()
	_, err := mustParseHL7("MSH|^~\\&|A").Enc.ParseField(text)
	if err == nil {
		t.Fatalf("pkg/hl7 accepts the field %q", text)
	}
	return err.Error()
}
