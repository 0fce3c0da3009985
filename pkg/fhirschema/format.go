package fhirschema

import (
	"regexp"
	"sync"
)

// format is a primitive type's value format: the regex of its
// StructureDefinition, anchored at both ends and compiled on first use.
//
// Validation runs on every write, and most values are strings, ids, codes and
// URIs, so the hot formats also have a hand-written matcher. One is used only
// when the regex text is exactly the one it was written for (a new release of
// the definitions with a changed regex falls back to the regex), and
// TestFastFormatsMatchRegex and FuzzFastFormats hold it to the regex.
type format struct {
	pattern string
	fast    func(string) bool

	once sync.Once
	re   *regexp.Regexp
}

func newFormat(pattern string) *format {
	return &format{pattern: pattern, fast: fastFormats[pattern]}
}

func (f *format) match(s string) bool {
	if f.fast != nil {
		return f.fast(s)
	}
	return f.regexp().MatchString(s)
}

// regexp compiles the pattern once. The generator compiled it already, so
// it cannot fail here.
func (f *format) regexp() *regexp.Regexp {
	f.once.Do(func() { f.re = regexp.MustCompile("^(?:" + f.pattern + ")$") })
	return f.re
}

// fastFormats maps R4's regex texts to equivalent matchers. Go's \s is
// [\t\n\f\r ], and \S is every other rune (invalid UTF-8 included).
var fastFormats = map[string]func(string) bool{
	`[ \r\n\t\S]+`:                  matchString,
	`\S*`:                           matchNoSpace,
	`[^\s]+(\s[^\s]+)*`:             matchCode,
	`[A-Za-z0-9\-\.]{1,64}`:         matchID,
	`(\s*([0-9a-zA-Z\+/=]){4}\s*)+`: matchBase64,
	`-?([0]|([1-9][0-9]*))`:         matchInteger,
	`[1-9][0-9]*`:                   matchPositiveInt,
	`[0]|([1-9][0-9]*)`:             matchUnsignedInt,
	`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`: matchDecimal,
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// matchString: [ \r\n\t\S]+ excludes only the form feed.
func matchString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\f' {
			return false
		}
	}
	return true
}

func matchNoSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) {
			return false
		}
	}
	return true
}

// matchCode: tokens separated by single whitespace characters, no leading
// or trailing whitespace.
func matchCode(s string) bool {
	if s == "" || isSpace(s[0]) || isSpace(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if isSpace(s[i]) && isSpace(s[i-1]) {
			return false
		}
	}
	return true
}

func matchID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// matchBase64: groups of four alphabet characters, whitespace allowed only
// between groups.
func matchBase64(s string) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isSpace(c):
			if n%4 != 0 {
				return false
			}
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '+' || c == '/' || c == '=':
			n++
		default:
			return false
		}
	}
	return n > 0 && n%4 == 0
}

// digits reports whether s is a run of digits without a leading zero (or a
// single zero when zero is allowed).
func digits(s string, zero bool) bool {
	if s == "" {
		return false
	}
	if s == "0" {
		return zero
	}
	if s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func matchInteger(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	return digits(s, true)
}

func matchPositiveInt(s string) bool { return digits(s, false) }

func matchUnsignedInt(s string) bool { return digits(s, true) }

func matchDecimal(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if !digits(s[:i], true) {
		return false
	}
	s = s[i:]
	if len(s) > 0 && s[0] == '.' {
		i = 1
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == 1 {
			return false
		}
		s = s[i:]
	}
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			s = s[1:]
		}
		if s == "" {
			return false
		}
		for i := 0; i < len(s); i++ {
			if !isDigit(s[i]) {
				return false
			}
		}
		return true
	}
	return s == ""
}
