package hl7

import "strings"

// parser builds the tree of a message, segment or field in two passes over
// its text. The first checks the syntax and counts every node against the
// limits without allocating, so that an input over a limit is refused
// before its memory is spent. The second allocates each level of the tree
// once, at the size counted (one slab of fields, one of repetitions, and so
// on), and fills it: a node is a window of the slab below it, its capacity
// capped so that appending to one field reallocates rather than overwrites
// the next. One walk serves both passes, so they cannot disagree.
type parser struct {
	enc  Encoding
	lim  Limits
	fill bool // second pass: store the nodes as well as count them

	// Where the walk is, for a LimitError.
	seg   int    // 1-based segment number, 0 in ParseField
	name  string // that segment's name
	field int    // HL7 number of the current field, 0 in ParseField

	// Nodes closed so far, of each kind: in the second pass, also the next
	// free index of each slab.
	nseg, nfield, nrep, ncomp, nsub int
	// Nodes closed so far in the open node above, for the per-level limits.
	inSeg, inField, inRep, inComp int
	// Where the open node above starts in the slab below.
	segStart, fieldStart, repStart, compStart int

	segs    []Segment
	segPtrs []*Segment
	fields  []Field
	reps    []Repetition
	comps   []Component
	subs    []string
}

// allocate sizes the slabs from the counting pass and starts the filling one.
func (p *parser) allocate() {
	p.segs = make([]Segment, p.nseg)
	p.segPtrs = make([]*Segment, p.nseg)
	p.fields = make([]Field, p.nfield)
	p.reps = make([]Repetition, p.nrep)
	p.comps = make([]Component, p.ncomp)
	p.subs = make([]string, p.nsub)
	*p = parser{enc: p.enc, lim: p.lim, fill: true, seg: p.seg, name: p.name,
		segs: p.segs, segPtrs: p.segPtrs, fields: p.fields, reps: p.reps, comps: p.comps, subs: p.subs}
}

// message reads every segment of text.
func (p *parser) message(text string) error {
	p.seg = 0
	for start := 0; start < len(text); {
		end := lineEnd(text, start)
		if end > start {
			p.seg++
			if err := p.segment(text[start:end]); err != nil {
				if pe, ok := err.(*ParseError); ok {
					pe.Segment = p.seg
					pe.Offset = start + pe.Column - 1
				}
				return err
			}
		}
		start = end + 1
	}
	return nil
}

// segment reads one line; a *ParseError carries only the column.
func (p *parser) segment(line string) error {
	if p.nseg == p.lim.MaxSegments {
		return &LimitError{Limit: "MaxSegments", Max: p.lim.MaxSegments, Segment: p.seg}
	}
	rest, split, perr := p.enc.segmentSyntax(line)
	if perr != nil {
		return perr
	}
	p.name, p.field = line[:3], 0
	if p.name == "MSH" {
		// MSH-1 and MSH-2 are single leaves, taken from the line.
		for _, f := range []string{line[3:4], line[4 : 4+len(p.enc.MSH2())]} {
			p.field++
			if err := p.endSubcomponent(f); err != nil {
				return err
			}
			if err := p.endField(); err != nil {
				return err
			}
		}
	}
	for split {
		p.field++
		f := rest
		if i := strings.IndexByte(rest, p.enc.Field); i >= 0 {
			f, rest = rest[:i], rest[i+1:]
		} else {
			split = false
		}
		if err := p.fieldText(f); err != nil {
			return err
		}
	}
	p.endSegment()
	return nil
}

// fieldText reads the text of one field, splitting it into repetitions,
// components and subcomponents.
func (p *parser) fieldText(text string) *LimitError {
	e := p.enc
	start, scan := 0, 0
	if len(text) > 64 && strings.IndexByte(text, e.Subcomponent) < 0 &&
		strings.IndexByte(text, e.Component) < 0 && strings.IndexByte(text, e.Repetition) < 0 {
		scan = len(text) // one long leaf, such as a base64 document: skip it at memchr speed
	}
	for i := scan; i < len(text); i++ {
		c := text[i]
		if c != e.Subcomponent && c != e.Component && c != e.Repetition {
			continue
		}
		if err := p.endSubcomponent(text[start:i]); err != nil {
			return err
		}
		start = i + 1
		var err *LimitError
		switch c {
		case e.Component:
			err = p.endComponent()
		case e.Repetition:
			err = p.endRepetition()
		}
		if err != nil {
			return err
		}
	}
	if err := p.endSubcomponent(text[start:]); err != nil {
		return err
	}
	return p.endField()
}

// The end* methods close one node of the tree, a subcomponent (a leaf) or
// the node that holds it: each counts the node, checks the limits, and in
// the second pass stores it.
func (p *parser) endSubcomponent(text string) *LimitError {
	if p.fill {
		p.subs[p.nsub] = text
	}
	p.nsub++
	if p.inComp++; p.inComp > p.lim.MaxSubcomponents {
		return p.over("MaxSubcomponents", p.lim.MaxSubcomponents)
	}
	return p.checkElements()
}

func (p *parser) endComponent() *LimitError {
	if p.fill {
		p.comps[p.ncomp] = p.subs[p.compStart:p.nsub:p.nsub]
	}
	p.ncomp++
	p.inComp, p.compStart = 0, p.nsub
	if p.inRep++; p.inRep > p.lim.MaxComponents {
		return p.over("MaxComponents", p.lim.MaxComponents)
	}
	return p.checkElements()
}

func (p *parser) endRepetition() *LimitError {
	if err := p.endComponent(); err != nil {
		return err
	}
	if p.fill {
		p.reps[p.nrep] = p.comps[p.repStart:p.ncomp:p.ncomp]
	}
	p.nrep++
	p.inRep, p.repStart = 0, p.ncomp
	if p.inField++; p.inField > p.lim.MaxRepetitions {
		return p.over("MaxRepetitions", p.lim.MaxRepetitions)
	}
	return p.checkElements()
}

func (p *parser) endField() *LimitError {
	if err := p.endRepetition(); err != nil {
		return err
	}
	if p.fill {
		p.fields[p.nfield] = p.reps[p.fieldStart:p.nrep:p.nrep]
	}
	p.nfield++
	p.inField, p.fieldStart = 0, p.nrep
	if p.inSeg++; p.inSeg > p.lim.MaxFields {
		p.field = 0 // the segment is the place, not its last field
		return p.over("MaxFields", p.lim.MaxFields)
	}
	return p.checkElements()
}

func (p *parser) endSegment() {
	if p.fill {
		s := &p.segs[p.nseg]
		s.Name = p.name
		if p.nfield > p.segStart {
			s.Fields = p.fields[p.segStart:p.nfield:p.nfield]
		}
		p.segPtrs[p.nseg] = s
	}
	p.nseg++
	p.inSeg, p.segStart = 0, p.nfield
}

func (p *parser) checkElements() *LimitError {
	if p.nfield+p.nrep+p.ncomp+p.nsub > p.lim.MaxElements {
		return p.over("MaxElements", p.lim.MaxElements)
	}
	return nil
}

func (p *parser) over(limit string, max int) *LimitError {
	return &LimitError{Limit: limit, Max: max, Segment: p.seg, Name: p.name, Field: p.field}
}

// ParseField splits the raw ER7 text of one field into repetitions,
// components and subcomponents, under DefaultLimits (the text is refused
// with a *LimitError when over one). The field separator is not a delimiter
// here: it stays in the leaf it appears in.
func (e Encoding) ParseField(text string) (Field, error) {
	lim := DefaultLimits.orDefaults()
	if len(text) > lim.MaxBytes {
		return nil, &LimitError{Limit: "MaxBytes", Max: lim.MaxBytes}
	}
	p := &parser{enc: e, lim: lim}
	if err := p.fieldText(text); err != nil {
		return nil, err
	}
	p.allocate()
	if err := p.fieldText(text); err != nil {
		return nil, err // not reached: the counting pass accepted the same text
	}
	return p.fields[0], nil
}

// ParseSegment parses one segment line under this encoding and
// DefaultLimits, for callers that build messages piecewise (as Medplum's
// Hl7Segment.parse does). An MSH line must declare this encoding. Errors
// are a *ParseError or a *LimitError, as from Parse, for segment 1.
func (e Encoding) ParseSegment(line string) (*Segment, error) {
	lim := DefaultLimits.orDefaults()
	if len(line) > lim.MaxBytes {
		return nil, &LimitError{Limit: "MaxBytes", Max: lim.MaxBytes}
	}
	p := &parser{enc: e, lim: lim, seg: 1}
	err := p.segment(line)
	if err == nil {
		p.allocate()
		err = p.segment(line) // cannot fail: the counting pass accepted the same line
	}
	if err != nil {
		if pe, ok := err.(*ParseError); ok {
			pe.Segment = 1
			pe.Offset = pe.Column - 1
		}
		return nil, err
	}
	return p.segPtrs[0], nil
}
