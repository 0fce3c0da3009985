package fhirschema

import (
	"regexp"
	"testing"
)

// formatCorpus exercises the hand-written matchers at their edges.
var formatCorpus = []string{
	"", " ", "a", "a ", " a", "a b", "a  b", "a\tb", "a\fb", "a\vb", "a\nb", "a\r\nb", "\f", "\u00a0", "é", "\xff", "a\x00b",
	"0", "00", "-0", "-", "1", "-1", "01", "10", "123456789", "2147483648", "+1", "1.", ".5", "1.5", "-1.50", "1e5", "1E+5",
	"1e-5", "1e", "1.5e3", "1.e3", "0.0", "00.1", "1_000", "0x10", "NaN", "Inf",
	"abcd", "abc", "ab==", "abc=", "a b c d", "abcd efgh", " abcd ", "ab cd", "abcd\n", "abcd\r\nefgh", "====", "ab+/",
	"abcde", "abc-", "A.b-9", "has space", "x/y", "urn:oid:1.2", "http://example.org/a?b=c#d",
	"0123456789012345678901234567890123456789012345678901234567890123",
	"01234567890123456789012345678901234567890123456789012345678901234",
}

func TestFastFormatsMatchRegex(t *testing.T) {
	alphabet := []string{"", "a", "0", "1", "-", ".", " ", "\t", "=", "e", "+"}
	for pattern, fast := range fastFormats {
		re := regexp.MustCompile("^(?:" + pattern + ")$")
		check := func(s string) {
			if got, want := fast(s), re.MatchString(s); got != want {
				t.Errorf("%s: fast(%q) = %v, regex says %v", pattern, s, got, want)
			}
		}
		for _, s := range formatCorpus {
			check(s)
		}
		// Every string of up to four symbols from a small alphabet.
		for _, a := range alphabet {
			for _, b := range alphabet {
				for _, c := range alphabet {
					for _, d := range alphabet {
						check(a + b + c + d)
					}
				}
			}
		}
	}
}

func TestEveryFastFormatIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, typ := range tables().types {
		if typ.format != nil && typ.format.fast != nil {
			used[typ.format.pattern] = true
		}
	}
	for pattern := range fastFormats {
		if !used[pattern] {
			t.Errorf("fast format %q matches no regex of the table", pattern)
		}
	}
}

func FuzzFastFormats(f *testing.F) {
	for _, s := range formatCorpus {
		f.Add(s)
	}
	res := map[string]*regexp.Regexp{}
	for pattern := range fastFormats {
		res[pattern] = regexp.MustCompile("^(?:" + pattern + ")$")
	}
	f.Fuzz(func(t *testing.T, s string) {
		for pattern, fast := range fastFormats {
			if got, want := fast(s), res[pattern].MatchString(s); got != want {
				t.Errorf("%s: fast(%q) = %v, regex says %v", pattern, s, got, want)
			}
		}
	})
}
