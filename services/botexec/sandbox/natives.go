package sandbox

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/pinion-health/pinion/pkg/hl7"
)

// natives is the one object through which the prelude reaches Go. It is
// passed to the prelude as an argument and never stored on the global object.
// Most operations go through one dispatcher, `call`, because every function
// object costs allocations in each fresh runtime and most bots use none of them.
func (st *runState) natives() *goja.Object {
	o := st.vm.NewObject()
	_ = o.Set("log", st.consoleLog)
	_ = o.Set("request", st.request)
	_ = o.Set("call", st.callNative)
	_ = o.Set("maxStringLength", max(st.lim.MemoryBytes/2, 1<<20))
	// The measuring walk recurses in JavaScript; leave it room below the
	// call-depth limit so that the RangeError, not a stack overflow, fires.
	_ = o.Set("maxJSONDepth", max(min(2000, st.lim.MaxCallDepth/2-50), 1))
	return o
}

// defineGlobals puts the host-implemented globals on the global object:
// timers (owned by this run's loop) and base64.
func (st *runState) defineGlobals() {
	g := st.vm.GlobalObject()
	def := func(name string, fn func(goja.FunctionCall) goja.Value) {
		_ = g.DefineDataProperty(name, st.vm.ToValue(fn), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	}
	def("setTimeout", func(c goja.FunctionCall) goja.Value { return st.setTimer(c, false, c.Argument(1)) })
	def("setInterval", func(c goja.FunctionCall) goja.Value { return st.setTimer(c, true, c.Argument(1)) })
	def("setImmediate", func(c goja.FunctionCall) goja.Value { return st.setTimer(c, false, nil) })
	def("clearTimeout", st.clearTimer)
	def("clearInterval", st.clearTimer)
	def("clearImmediate", st.clearTimer)
	def("atob", func(c goja.FunctionCall) goja.Value { return nativeAtob(st, c.Arguments) })
	def("btoa", func(c goja.FunctionCall) goja.Value { return nativeBtoa(st, c.Arguments) })
}

func (st *runState) callNative(c goja.FunctionCall) goja.Value {
	op, ok := nativeOps[c.Argument(0).String()]
	if !ok {
		panic(st.vm.NewTypeError("unknown native operation"))
	}
	return op(st, c.Arguments[1:])
}

func arg(args []goja.Value, i int) goja.Value {
	if i < len(args) {
		return args[i]
	}
	return goja.Undefined()
}

// nativeOps are the operations behind native.call, by name.
var nativeOps = map[string]func(st *runState, args []goja.Value) goja.Value{
	"utf8Encode": func(st *runState, args []goja.Value) goja.Value {
		return st.vm.ToValue(st.vm.NewArrayBuffer([]byte(arg(args, 0).String())))
	},
	"utf8Decode": func(st *runState, args []goja.Value) goja.Value {
		ab, ok := arg(args, 0).Export().(goja.ArrayBuffer)
		if !ok {
			panic(st.vm.NewTypeError("expected an ArrayBuffer"))
		}
		b := ab.Bytes()
		off, n := int(arg(args, 1).ToInteger()), int(arg(args, 2).ToInteger())
		if off < 0 || n < 0 || off+n > len(b) {
			panic(st.vm.NewTypeError("byte range out of bounds"))
		}
		return st.vm.ToValue(strings.ToValidUTF8(string(b[off:off+n]), "\uFFFD"))
	},
	"parseURL": func(st *runState, args []goja.Value) goja.Value {
		return st.parseURL(arg(args, 0).String(), arg(args, 1).String())
	},
	"hl7Parse": func(st *runState, args []goja.Value) goja.Value {
		m, err := hl7.Parse(arg(args, 0).String())
		if err != nil {
			panic(st.vm.NewGoError(err))
		}
		return st.hl7MessageToJS(m)
	},
	"hl7ParseSegment": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 1))
		s, err := enc.ParseSegment(arg(args, 0).String())
		if err != nil {
			panic(st.vm.NewGoError(err))
		}
		return st.hl7SegmentToJS(enc, s)
	},
	"hl7ParseField": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 1))
		return st.hl7FieldToJS(enc, st.parseField(enc, arg(args, 0).String()))
	},
	"hl7Format": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 0))
		m := &hl7.Message{Enc: enc, Segments: st.segmentsFromJS(enc, arg(args, 1))}
		return st.vm.ToValue(m.String())
	},
	"hl7FormatSegment": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 0))
		return st.vm.ToValue(enc.FormatSegment(st.segmentFromJS(enc, arg(args, 1).Export())))
	},
	"hl7FormatField": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 0))
		return st.vm.ToValue(enc.FormatField(st.fieldFromJS(enc, arg(args, 1).Export())))
	},
	"hl7Subcomponent": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 1))
		subs := st.parseField(enc, arg(args, 0).String())[0][0]
		i := int(arg(args, 2).ToInteger())
		if i < 0 || i >= len(subs) {
			return st.vm.ToValue("")
		}
		return st.vm.ToValue(subs[i])
	},
	"hl7SetSubcomponent": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 1))
		subs := st.parseField(enc, arg(args, 0).String())[0][0]
		i := int(arg(args, 2).ToInteger())
		if i < 0 || i > 1000 {
			panic(st.vm.NewTypeError("subcomponent index out of range"))
		}
		for len(subs) <= i {
			subs = append(subs, "")
		}
		subs[i] = arg(args, 3).String()
		return st.vm.ToValue(enc.FormatComponent(subs))
	},
	"hl7BuildAck": func(st *runState, args []goja.Value) goja.Value {
		enc := st.encoding(arg(args, 0))
		m := &hl7.Message{Enc: enc, Segments: st.segmentsFromJS(enc, arg(args, 1))}
		return st.hl7MessageToJS(hl7.BuildAck(m, arg(args, 2).String()))
	},
}

func nativeAtob(st *runState, args []goja.Value) goja.Value {
	s := strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' {
			return -1
		}
		return r
	}, arg(args, 0).String())
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	}
	if err != nil {
		panic(st.vm.NewGoError(errors.New("The string to be decoded is not correctly encoded.")))
	}
	r := make([]rune, len(b))
	for i, x := range b {
		r[i] = rune(x)
	}
	return st.vm.ToValue(string(r))
}

func nativeBtoa(st *runState, args []goja.Value) goja.Value {
	s := arg(args, 0).String()
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			panic(st.vm.NewGoError(errors.New("Invalid character")))
		}
		b = append(b, byte(r))
	}
	return st.vm.ToValue(base64.StdEncoding.EncodeToString(b))
}

func (st *runState) parseURL(raw, base string) goja.Value {
	vm := st.vm
	invalid := func() { panic(vm.NewTypeError("Invalid URL")) }
	u, err := url.Parse(raw)
	if err != nil {
		invalid()
	}
	if base != "" {
		b, err := url.Parse(base)
		if err != nil || b.Scheme == "" {
			invalid()
		}
		u = b.ResolveReference(u)
	}
	if u.Scheme == "" {
		invalid()
	}
	path := u.EscapedPath()
	if path == "" && u.Host != "" {
		path = "/"
	}
	o := vm.NewObject()
	pw, _ := u.User.Password()
	for k, v := range map[string]string{
		"protocol": u.Scheme + ":",
		"username": u.User.Username(),
		"password": pw,
		"hostname": u.Hostname(),
		"port":     u.Port(),
		"pathname": path,
		"search":   u.RawQuery,
		"hash":     "",
	} {
		_ = o.Set(k, v)
	}
	if u.Fragment != "" {
		_ = o.Set("hash", "#"+u.EscapedFragment())
	}
	return o
}

// encoding reads an Hl7Context's MSH-1 + MSH-2 string, validated by the same
// code that validates a message header.
func (st *runState) encoding(v goja.Value) hl7.Encoding {
	s := v.String()
	m, err := hl7.Parse("MSH" + s)
	if err != nil || len(m.Segments) != 1 {
		panic(st.vm.NewTypeError(fmt.Sprintf("invalid HL7 encoding characters %q", s)))
	}
	return m.Enc
}

// The JavaScript shape of HL7 data is Medplum's: a segment is a list of
// fields whose first is the segment name (and, in MSH, whose second is MSH-2),
// and a field is string[][]: repetitions of components, subcomponents joined.

func (st *runState) hl7MessageToJS(m *hl7.Message) goja.Value {
	segs := make([]any, len(m.Segments))
	for i, s := range m.Segments {
		segs[i] = st.hl7SegmentToJS(m.Enc, s)
	}
	o := st.vm.NewObject()
	_ = o.Set("enc", string(m.Enc.Field)+m.Enc.MSH2())
	_ = o.Set("segments", st.vm.NewArray(segs...))
	return o
}

func (st *runState) hl7SegmentToJS(enc hl7.Encoding, s *hl7.Segment) goja.Value {
	fields := s.Fields
	if s.Name == "MSH" && len(fields) > 0 {
		fields = fields[1:] // Medplum's MSH list has no entry for MSH-1
	}
	out := make([]any, 0, len(fields)+1)
	out = append(out, st.hl7FieldToJS(enc, hl7.Field{{{s.Name}}}))
	for _, f := range fields {
		out = append(out, st.hl7FieldToJS(enc, f))
	}
	return st.vm.NewArray(out...)
}

func (st *runState) hl7FieldToJS(enc hl7.Encoding, f hl7.Field) goja.Value {
	reps := make([]any, len(f))
	for i, r := range f {
		comps := make([]any, len(r))
		for j, c := range r {
			comps[j] = enc.FormatComponent(c)
		}
		reps[i] = st.vm.NewArray(comps...)
	}
	return st.vm.NewArray(reps...)
}

func (st *runState) segmentsFromJS(enc hl7.Encoding, v goja.Value) []*hl7.Segment {
	list, ok := v.Export().([]any)
	if !ok {
		panic(st.vm.NewTypeError("HL7 segments must be an array"))
	}
	out := make([]*hl7.Segment, len(list))
	for i, s := range list {
		out[i] = st.segmentFromJS(enc, s)
	}
	return out
}

func (st *runState) segmentFromJS(enc hl7.Encoding, v any) *hl7.Segment {
	fields, ok := v.([]any)
	if !ok || len(fields) == 0 {
		panic(st.vm.NewTypeError("an HL7 segment must be a non-empty array of fields"))
	}
	s := &hl7.Segment{Name: enc.FormatField(st.fieldFromJS(enc, fields[0]))}
	rest := fields[1:]
	if s.Name == "MSH" {
		// MSH-1 and MSH-2 are written from the encoding, whatever the
		// fields say, so a message always declares the delimiters it uses.
		s.Fields = []hl7.Field{{{{string(enc.Field)}}}, {{{enc.MSH2()}}}}
		if len(rest) > 0 {
			rest = rest[1:]
		}
	}
	for _, f := range rest {
		s.Fields = append(s.Fields, st.fieldFromJS(enc, f))
	}
	return s
}

// parseField parses one field, throwing a JavaScript error when it is over
// pkg/hl7's limits.
func (st *runState) parseField(enc hl7.Encoding, text string) hl7.Field {
	f, err := enc.ParseField(text)
	if err != nil {
		panic(st.vm.NewGoError(err))
	}
	return f
}

// fieldFromJS rebuilds a field from Medplum's string[][] by formatting it
// back to ER7 text and parsing that, so the grammar lives only in pkg/hl7.
func (st *runState) fieldFromJS(enc hl7.Encoding, v any) hl7.Field {
	var b strings.Builder
	reps, _ := v.([]any)
	for i, r := range reps {
		if i > 0 {
			b.WriteByte(enc.Repetition)
		}
		comps, ok := r.([]any)
		if !ok {
			b.WriteString(text(r))
			continue
		}
		for j, c := range comps {
			if j > 0 {
				b.WriteByte(enc.Component)
			}
			b.WriteString(text(c))
		}
	}
	return st.parseField(enc, b.String())
}

func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	}
	s := fmt.Sprint(v)
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
