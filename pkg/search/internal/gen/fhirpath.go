package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// The FHIRPath subset compiled here covers most search parameters:
//
//	A.b.c                      dotted paths (choice elements expand to valueX keys)
//	A | B                      unions
//	(A)                        grouping
//	A.ofType(T), A.as(T), A as T   choice-type selection
//	A.where(k = 'v')           equality filter on a child element
//	A.where(resolve() is T)    references to resources of type T
//	A.resolve().resourceType   the type named by a reference (no lookup)
//	A.exists()                 boolean
//	A.exists() and A != false  boolean, Patient.deceased's form
//
// Anything else (iif, indexers, other functions, arithmetic) is an error, and
// the parameter is left out of the table.

type opKind int

const (
	opMember opKind = iota
	opOfType
	opWhereEq
	opWhereIs
	opResolve
	opExists
	opTruthy
)

type rawOp struct {
	kind        opKind
	name, value string
}

type rawPath []rawOp

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number, 'p' punctuation
	text string
}

func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || unicode.IsLetter(rune(c)):
			j := i
			for j < len(s) && (s[j] == '_' || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			toks = append(toks, token{'i', s[i:j]})
			i = j
		case c == '`':
			j := strings.IndexByte(s[i+1:], '`')
			if j < 0 {
				return nil, errors.New("unterminated `identifier`")
			}
			toks = append(toks, token{'i', s[i+1 : i+1+j]})
			i += j + 2
		case unicode.IsDigit(rune(c)):
			j := i
			for j < len(s) && (unicode.IsDigit(rune(s[j])) || s[j] == '.') {
				j++
			}
			toks = append(toks, token{'n', s[i:j]})
			i = j
		case c == '\'':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '\''; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, errors.New("unterminated string")
			}
			toks = append(toks, token{'s', b.String()})
			i = j + 1
		case c == '!' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, token{'p', "!="})
			i += 2
		case strings.IndexByte(".()|=,[]<>+-*/&~", c) >= 0:
			toks = append(toks, token{'p', string(c)})
			i++
		default:
			return nil, fmt.Errorf("unexpected character %q", c)
		}
	}
	return toks, nil
}

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return token{}
}

func (p *parser) isPunct(s string) bool { t := p.peek(); return t.kind == 'p' && t.text == s }
func (p *parser) isWord(s string) bool  { t := p.peek(); return t.kind == 'i' && t.text == s }

func (p *parser) expectPunct(s string) error {
	if !p.isPunct(s) {
		return fmt.Errorf("expected %q, found %q", s, p.peek().text)
	}
	p.i++
	return nil
}

func (p *parser) ident() (string, error) {
	t := p.peek()
	if t.kind != 'i' {
		return "", fmt.Errorf("expected a name, found %q", t.text)
	}
	p.i++
	return t.text, nil
}

// typeName reads a type specifier, allowing the FHIR. namespace.
func (p *parser) typeName() (string, error) {
	n, err := p.ident()
	if err != nil {
		return "", err
	}
	if n == "FHIR" && p.isPunct(".") {
		p.i++
		return p.ident()
	}
	return n, nil
}

// parseExpression parses a whole expression into the union of its paths.
func parseExpression(expr string) ([]rawPath, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	paths, err := p.union()
	if err != nil {
		return nil, err
	}
	if p.i != len(p.toks) {
		return nil, fmt.Errorf("unsupported syntax at %q", p.peek().text)
	}
	return paths, nil
}

func (p *parser) union() ([]rawPath, error) {
	paths, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.isPunct("|") {
		p.i++
		more, err := p.and()
		if err != nil {
			return nil, err
		}
		paths = append(paths, more...)
	}
	return paths, nil
}

// and accepts only `X.exists() and X != false`.
func (p *parser) and() ([]rawPath, error) {
	left, err := p.as()
	if err != nil {
		return nil, err
	}
	if p.isPunct("=") || p.isPunct("!=") {
		return nil, errors.New("comparisons are not supported")
	}
	if !p.isWord("and") {
		return left, nil
	}
	p.i++
	right, err := p.as()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct("!="); err != nil {
		return nil, errors.New("only `X.exists() and X != false` is supported")
	}
	if !p.isWord("false") {
		return nil, errors.New("only `X.exists() and X != false` is supported")
	}
	p.i++
	if len(left) != 1 || len(right) != 1 {
		return nil, errors.New("`and` over unions is not supported")
	}
	l, r := left[0], right[0]
	if len(l) == 0 || l[len(l)-1].kind != opExists || !samePath(l[:len(l)-1], r) {
		return nil, errors.New("only `X.exists() and X != false` is supported")
	}
	truthy := append(append(rawPath{}, r...), rawOp{kind: opTruthy})
	return []rawPath{truthy}, nil
}

func samePath(a, b rawPath) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (p *parser) as() ([]rawPath, error) {
	paths, err := p.term()
	if err != nil {
		return nil, err
	}
	switch {
	case p.isWord("as"):
		p.i++
		t, err := p.typeName()
		if err != nil {
			return nil, err
		}
		for i := range paths {
			paths[i] = append(paths[i], rawOp{kind: opOfType, name: t})
		}
	case p.isWord("is"):
		return nil, errors.New("`is` is supported only inside where(resolve() is T)")
	}
	return paths, nil
}

func (p *parser) term() ([]rawPath, error) {
	var paths []rawPath
	switch t := p.peek(); {
	case t.kind == 'p' && t.text == "(":
		p.i++
		inner, err := p.union()
		if err != nil {
			return nil, err
		}
		if err := p.expectPunct(")"); err != nil {
			return nil, err
		}
		paths = inner
	case t.kind == 'i':
		p.i++
		if p.isPunct("(") {
			return nil, fmt.Errorf("function %s() is not supported", t.text)
		}
		paths = []rawPath{{{kind: opMember, name: t.text}}}
	default:
		return nil, fmt.Errorf("unsupported term %q", t.text)
	}
	for p.isPunct(".") {
		p.i++
		op, err := p.invocation()
		if err != nil {
			return nil, err
		}
		for i := range paths {
			paths[i] = append(append(rawPath{}, paths[i]...), op)
		}
	}
	if p.isPunct("[") {
		return nil, errors.New("indexers are not supported")
	}
	return paths, nil
}

func (p *parser) invocation() (rawOp, error) {
	name, err := p.ident()
	if err != nil {
		return rawOp{}, err
	}
	if !p.isPunct("(") {
		return rawOp{kind: opMember, name: name}, nil
	}
	p.i++
	var op rawOp
	switch name {
	case "ofType", "as":
		t, err := p.typeName()
		if err != nil {
			return rawOp{}, err
		}
		op = rawOp{kind: opOfType, name: t}
	case "resolve":
		op = rawOp{kind: opResolve}
	case "exists":
		op = rawOp{kind: opExists}
	case "where":
		if p.isWord("resolve") {
			p.i++
			if err := p.expectPunct("("); err != nil {
				return rawOp{}, err
			}
			if err := p.expectPunct(")"); err != nil {
				return rawOp{}, err
			}
			if !p.isWord("is") {
				return rawOp{}, errors.New("only where(resolve() is T) is supported")
			}
			p.i++
			t, err := p.typeName()
			if err != nil {
				return rawOp{}, err
			}
			op = rawOp{kind: opWhereIs, name: t}
			break
		}
		k, err := p.ident()
		if err != nil {
			return rawOp{}, err
		}
		if err := p.expectPunct("="); err != nil {
			return rawOp{}, errors.New("only where(element = 'literal') is supported")
		}
		v := p.peek()
		if v.kind != 's' {
			return rawOp{}, errors.New("only where(element = 'literal') is supported")
		}
		p.i++
		op = rawOp{kind: opWhereEq, name: k, value: v.text}
	default:
		return rawOp{}, fmt.Errorf("function %s() is not supported", name)
	}
	if err := p.expectPunct(")"); err != nil {
		return rawOp{}, err
	}
	return op, nil
}

// alt is one JSON key a member step may read, with what it holds.
type alt struct {
	key, typ string
	name     string // the FHIRPath member name, for ofType on unknown elements
	sd, path string // where its children are defined; sd == "" when unknown
}

// compile turns an expression into the program text for one base type.
func compile(sch *schema, paramType, base, expr string) (string, error) {
	paths, err := parseExpression(expr)
	if err != nil {
		return "", err
	}
	var out []string
	seen := map[string]bool{}
	for _, rp := range paths {
		root := rp[0]
		if root.kind != opMember {
			continue
		}
		rootType, ops := root.name, rp[1:]
		switch {
		case root.name == base || root.name == "Resource" || root.name == "DomainResource":
		case unicode.IsLower(rune(root.name[0])):
			// A path relative to the resource, as in InsurancePlan's "name | alias".
			rootType, ops = base, rp
		default:
			continue // a path for another base type
		}
		s, err := compilePath(sch, paramType, rootType, ops)
		if err == errNoValues {
			continue
		}
		if err != nil {
			return "", err
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "", fmt.Errorf("no path for %s with %s values in %q", base, paramType, expr)
	}
	return strings.Join(out, "|"), nil
}

// errNoValues marks a path whose values can never have the parameter's type.
var errNoValues = errors.New("no value of a searchable type")

// step is one compiled step: a member step (alts) or an operation (text).
type step struct {
	alts []alt
	text string
}

func compilePath(sch *schema, paramType, root string, ops rawPath) (string, error) {
	if len(ops) == 0 {
		return "", errors.New("path selects the resource itself")
	}
	cur := []alt{{}} // a resource type without a StructureDefinition is unknown
	if td, ok := sch.types[root]; ok {
		cur[0] = alt{typ: root, sd: root, path: td.root}
	}
	var steps []step
	var pending []alt // the last member step, which ofType may still narrow
	flush := func() {
		if pending != nil {
			steps = append(steps, step{alts: pending})
			cur, pending = pending, nil
		}
	}
	terminal := false
	for i, op := range ops {
		if terminal {
			return "", errors.New("nothing may follow exists() or resourceType")
		}
		switch op.kind {
		case opMember:
			if i > 0 && ops[i-1].kind == opResolve {
				if op.name != "resourceType" {
					return "", errors.New("resolve() is supported only as resolve().resourceType")
				}
				steps = append(steps, step{text: "@type"})
				terminal = true
				continue
			}
			if pending != nil {
				// Keep only the alternatives that can hold this member, so a
				// step such as Extension.value lists valueCodeableConcept, not
				// fifty value[x] keys, when .coding follows.
				pending = prune(sch, pending, op.name)
			}
			flush()
			next, err := member(sch, cur, op.name)
			if err != nil {
				return "", err
			}
			pending = next
		case opOfType:
			if pending == nil {
				return "", errors.New("ofType() must follow an element")
			}
			var kept []alt
			for _, a := range pending {
				switch {
				case a.typ == op.name:
					kept = append(kept, a)
				case a.sd == "" && a.typ == "":
					// Unknown element: it is either a choice or of type T.
					kept = append(kept, alt{key: a.name + upperFirst(op.name), typ: op.name, name: a.name},
						alt{key: a.name, typ: op.name, name: a.name})
				}
			}
			if len(kept) == 0 {
				return "", fmt.Errorf("no element of type %s", op.name)
			}
			for i := range kept {
				if td, ok := sch.types[kept[i].typ]; ok && kept[i].sd == "" {
					kept[i].sd, kept[i].path = kept[i].typ, td.root
				}
			}
			pending = kept
		case opWhereEq:
			flush()
			steps = append(steps, step{text: "?" + escape(op.name) + "=" + escape(op.value)})
		case opWhereIs:
			flush()
			steps = append(steps, step{text: "@is=" + escape(op.name)})
		case opResolve:
			flush()
			if i == len(ops)-1 {
				return "", errors.New("resolve() is supported only as resolve().resourceType")
			}
		case opExists:
			flush()
			steps = append(steps, step{text: "!exists"})
			terminal = true
		case opTruthy:
			flush()
			steps = append(steps, step{text: "!truthy"})
			terminal = true
		}
	}
	flush()

	// The value step is the last member step when only filters follow it;
	// drop the alternatives whose type the parameter cannot index (a date
	// parameter over Procedure.performed[x] has no use for performedString).
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].alts != nil {
			var kept []alt
			for _, a := range steps[i].alts {
				if a.typ == "" || indexable(paramType, a.typ) {
					kept = append(kept, a)
				}
			}
			if len(kept) == 0 {
				return "", errNoValues
			}
			steps[i].alts = kept
			break
		}
		if !strings.HasPrefix(steps[i].text, "?") && !strings.HasPrefix(steps[i].text, "@is=") {
			break // exists(), resourceType: the value is computed
		}
	}
	parts := make([]string, len(steps))
	for i, st := range steps {
		if st.alts != nil {
			parts[i] = encodeMember(st.alts)
		} else {
			parts[i] = st.text
		}
	}
	return strings.Join(parts, "."), nil
}

// indexable reports whether package search can take values of FHIR type t
// for a parameter of type paramType; it mirrors the runtime's extractors.
func indexable(paramType, t string) bool {
	primitive := t != "" && unicode.IsLower(rune(t[0]))
	switch paramType {
	case "string":
		switch t {
		case "HumanName", "Address", "ContactPoint", "Identifier", "CodeableConcept", "Coding", "Annotation":
			return true
		}
		return primitive && t != "boolean" && t != "base64Binary"
	case "token":
		switch t {
		case "Coding", "CodeableConcept", "Identifier", "ContactPoint":
			return true
		}
		return primitive && t != "base64Binary"
	case "reference":
		switch t {
		case "Reference", "canonical", "uri", "url":
			return true
		}
	case "date":
		switch t {
		case "date", "dateTime", "instant", "Period", "Timing":
			return true
		}
	case "number":
		switch t {
		case "decimal", "integer", "integer64", "unsignedInt", "positiveInt":
			return true
		}
	case "quantity":
		switch t {
		case "Quantity", "Age", "Duration", "Distance", "Count", "Money", "SimpleQuantity", "MoneyQuantity":
			return true
		}
	case "uri":
		switch t {
		case "uri", "url", "canonical", "oid", "uuid", "id", "string", "code":
			return true
		}
	}
	return false
}

// prune drops the alternatives of known type that have no element called name.
func prune(sch *schema, alts []alt, name string) []alt {
	var kept []alt
	for _, a := range alts {
		td := sch.types[a.sd]
		if (td == nil && a.typ == "") || (td != nil && td.elems[a.path+"."+name] != nil) {
			kept = append(kept, a)
		}
	}
	if len(kept) == 0 {
		return alts // member() reports the error
	}
	return kept
}

// member finds what a member name selects from each current alternative.
func member(sch *schema, cur []alt, name string) ([]alt, error) {
	var next []alt
	unknown := false
	for _, c := range cur {
		td := sch.types[c.sd]
		if td == nil {
			// An element of unknown type may have any member; one of a
			// known type without a definition (a primitive) has none.
			unknown = unknown || c.typ == ""
			continue
		}
		ed := td.elems[c.path+"."+name]
		if ed == nil {
			continue
		}
		if ed.contentRef != "" {
			next = append(next, alt{key: name, typ: "BackboneElement", name: name, sd: c.sd, path: ed.contentRef})
			continue
		}
		for _, t := range ed.types {
			a := alt{key: name, typ: t, name: name}
			if ed.choice {
				a.key = name + upperFirst(t)
			}
			switch {
			case t == "BackboneElement" || t == "Element":
				a.sd, a.path = c.sd, c.path+"."+name
			case sch.types[t] != nil:
				a.sd, a.path = t, sch.types[t].root
			}
			next = append(next, a)
		}
	}
	if unknown {
		next = append(next, alt{key: name, name: name})
	}
	if len(next) == 0 {
		return nil, fmt.Errorf("no element %q", name)
	}
	// One key may be reached from several contexts; keep it once, and
	// forget its type when the contexts disagree.
	var out []alt
	idx := map[string]int{}
	for _, a := range next {
		if i, ok := idx[a.key]; ok {
			if out[i].typ != a.typ {
				out[i].typ = ""
			}
			continue
		}
		idx[a.key] = len(out)
		out = append(out, a)
	}
	return out, nil
}

func encodeMember(alts []alt) string {
	parts := make([]string, len(alts))
	for i, a := range alts {
		if a.typ == "" || strings.ContainsAny(a.typ, ",:.|?@!=%\t") {
			parts[i] = a.key
		} else {
			parts[i] = a.key + ":" + a.typ
		}
	}
	return strings.Join(parts, ",")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// escape percent-encodes everything but letters, digits, '-' and '_', so a
// literal can never be mistaken for program syntax.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
