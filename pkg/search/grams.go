package search

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pinion-health/pinion/pkg/store"
)

// Trigrams for :contains on names.
//
// name:contains=mit matches a Smith anywhere in a project. Without an index
// the store can only walk the project's Patients testing each one, which at
// 100,000 Patients costs what the walk to the twentieth match costs (about
// 1,400 Patients when 1.4% match). So a parameter whose values are
// HumanNames also stores the three-letter pieces (trigrams) of its
// normalised values in s_<code>_grams, and :contains=v adds, beside the
// contains condition itself, "grams has g" for a few trigrams g of v: the
// store walks the rarest of them, which every match has, and tests the
// rest. Trigrams are taken within words; a value with no word of three
// letters has none to look up and is walked as before.
//
// One set serves a resource's name, family and given: their values are
// all among the name's (stringsOf), so a family containing v is a name
// containing v. Only names have trigrams: they are what people search by
// fragment (Medplum keeps trigram indexes on HumanName alone), and each
// trigram is a row more on every write.

// gramSize is the length, in letters, of a gram.
const gramSize = 3

// gramsOwner reports whether p stores trigrams: a string parameter whose
// every path selects HumanNames.
func gramsOwner(p *Param) bool {
	if p.Type != "string" || len(p.paths) == 0 {
		return false
	}
	for _, pa := range p.paths {
		if len(pa) != 1 || pa[0].op != opField {
			return false
		}
		for _, t := range pa[0].types {
			if t != "HumanName" {
				return false
			}
		}
	}
	return true
}

// nameParts are the HumanName elements whose text stringsOf adds to a
// name's values.
var nameParts = map[string]bool{"family": true, "given": true, "prefix": true, "suffix": true, "text": true}

// gramsFrom reports whether owner's trigrams answer p's :contains: each
// path of p selects a part of the names owner's one path selects.
func gramsFrom(p, owner *Param) bool {
	if p.Type != "string" || len(owner.paths) != 1 || len(p.paths) == 0 {
		return false
	}
	root := owner.paths[0][0]
	for _, pa := range p.paths {
		if len(pa) != 2 || pa[0].op != opField || !slices.Equal(pa[0].keys, root.keys) || !slices.Equal(pa[0].types, root.types) {
			return false
		}
		if pa[1].op != opField {
			return false
		}
		for _, k := range pa[1].keys {
			if !nameParts[k] {
				return false
			}
		}
	}
	return true
}

// linkGrams records, for each of r's types, which trigram field answers
// each string parameter's :contains.
func (r *registry) linkGrams() {
	r.grams = map[string]map[string]string{}
	for t, list := range r.lists {
		for _, p := range list {
			if !gramsOwner(p) {
				continue
			}
			m := r.grams[t]
			if m == nil {
				m = map[string]string{}
				r.grams[t] = m
			}
			m[p.Code] = p.f.grams
			for _, q := range list {
				if q != p && gramsFrom(q, p) {
					m[q.Code] = p.f.grams
				}
			}
		}
	}
}

// grams calls f with each trigram of v that lies within a word: a name's
// values include the full name, whose trigrams across a space would be
// rows more for every name, looked up only by a :contains across a space.
func grams(v string, f func(string)) {
	// starts holds the byte offsets of the last gramSize runes.
	var starts [gramSize]int
	n := 0
	for i, r := range v {
		if r == ' ' {
			n = 0
			continue
		}
		copy(starts[:], starts[1:])
		starts[gramSize-1] = i
		if n++; n >= gramSize {
			_, w := utf8.DecodeRuneInString(v[i:])
			f(v[starts[0] : i+w])
		}
	}
}

// isGram reports whether v is one trigram: three letters of one word.
func isGram(v string) bool {
	return utf8.RuneCountInString(v) == gramSize && !strings.Contains(v, " ")
}

// gramsOf lists the distinct trigrams of values, sorted.
func gramsOf(values []string) []string {
	set := make(map[string]struct{}, 16)
	for _, v := range values {
		grams(v, func(g string) { set[g] = struct{}{} })
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// gramConds are the conditions "field has g" for a few trigrams g of v
// (normalised), none when no word of v is as long as a trigram. The store
// counts each as a candidate to walk; the first, the middle and the last
// are as likely as all of them to hold a rare one.
func gramConds(field, v string) []store.Cond {
	var all []string
	grams(v, func(g string) {
		if !slices.Contains(all, g) {
			all = append(all, g)
		}
	})
	if len(all) == 0 {
		return nil
	}
	var out []store.Cond
	for _, k := range []int{0, (len(all) - 1) / 2, len(all) - 1} {
		c := store.Eq(field, all[k])
		if !slices.ContainsFunc(out, func(o store.Cond) bool { return o.Values[0] == c.Values[0] }) {
			out = append(out, c)
		}
	}
	return out
}

// FieldsVersion numbers what Fields stores for a resource type. Raise it
// for the types whose fields a change alters: the repository brings the
// fields of resources stored before up to date when it starts
// (store.Store.Reindex). 1 is every type's first; 2 added the names'
// trigrams.
func FieldsVersion(resourceType string) int {
	if len(loadRegistry().grams[resourceType]) > 0 {
		return 2
	}
	return 1
}
