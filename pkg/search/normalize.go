package search

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxStored bounds one stored string: enough for any prefix or exact match
// people make, small enough that no document grows without limit.
const maxStored = 1024

// letters without a canonical decomposition that people type unaccented.
var foldSpecial = map[rune]string{
	'ß': "ss", 'æ': "ae", 'Æ': "ae", 'œ': "oe", 'Œ': "oe", 'ø': "o", 'Ø': "o",
	'ł': "l", 'Ł': "l", 'đ': "d", 'Đ': "d", 'ħ': "h", 'Ħ': "h", 'ı': "i", 'þ': "th", 'Þ': "th",
}

// normalize makes the form string search compares: lower case, accents
// removed, runs of white space as one space, trimmed, at most maxStored
// bytes. Stored values and query values go through the same function, so
// "Müller", "MULLER" and "muller" all match.
func normalize(s string) string {
	ascii, clean := true, len(s) <= maxStored
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= utf8.RuneSelf:
			ascii, clean = false, false
		case 'A' <= c && c <= 'Z', c < ' ', c == ' ' && (i == 0 || i == len(s)-1 || s[i-1] == ' '):
			clean = false
		}
	}
	if clean {
		return s // already lower case ASCII with single inner spaces
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	emit := func(r rune) {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			return
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	if ascii {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			emit(rune(c))
		}
	} else {
		for _, r := range norm.NFD.String(s) {
			if unicode.Is(unicode.Mn, r) {
				continue
			}
			if f, ok := foldSpecial[r]; ok {
				for _, x := range f {
					emit(x)
				}
				continue
			}
			emit(unicode.ToLower(r))
		}
	}
	return truncate(b.String())
}

// truncate cuts s to at most maxStored bytes on a rune boundary.
func truncate(s string) string {
	if len(s) <= maxStored {
		return s
	}
	i := maxStored
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
