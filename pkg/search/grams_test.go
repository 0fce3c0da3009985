package search

import (
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/store"
)

func TestGramsOf(t *testing.T) {
	got := gramsOf([]string{"smith", "maria smith", "al", "müller"})
	want := []string{"ari", "ith", "ler", "lle", "mar", "mit", "mül", "ria", "smi", "üll"}
	if !slices.Equal(got, want) {
		t.Fatalf("gramsOf = %q, want %q", got, want)
	}
}

// Names store trigrams, once for the name and its parts; other strings do
// not.
func TestGramFields(t *testing.T) {
	p := Fields("Patient", decode(t, `{"resourceType":"Patient","name":[{"family":"Smith","given":["Jo"]}],"address":[{"city":"Springfield"}]}`))
	if got, want := p["s_name_grams"], []string{"mit", "smi", "ith"}; !sameSet(got.([]string), want) {
		t.Fatalf("s_name_grams = %q, want %q", got, want)
	}
	for _, f := range []string{"s_family_grams", "s_given_grams", "s_address_grams", "s_address_city_grams"} {
		if _, ok := p[f]; ok {
			t.Errorf("%s stored", f)
		}
	}
	if o := Fields("Organization", decode(t, `{"resourceType":"Organization","name":"Smith Clinic"}`)); o["s_name_grams"] != nil {
		t.Errorf("an Organization's name (a string, not a HumanName) stored trigrams")
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// :contains on a name, family or given looks up the name's trigrams; on
// other strings, or with fewer than three letters, it does not.
func TestParseContainsGrams(t *testing.T) {
	tests := []struct {
		typ, query string
		grams      []string // the trigram conditions, in order
	}{
		{"Patient", "name:contains=Mit", []string{"mit"}},
		{"Patient", "family:contains=smith", []string{"smi", "mit", "ith"}},
		{"Patient", "family:contains=mit", []string{"mit"}},
		{"Practitioner", "given:contains=JOHANNA", []string{"joh", "han", "nna"}},
		{"Patient", "name:contains=aaaa", []string{"aaa"}},
		{"Patient", "name:contains=ia sm", nil},
		{"Patient", "name:contains=a smi", []string{"smi"}},
		{"Patient", "name:contains=ab cd", nil},
		{"Patient", "name:contains=mü", nil},
		{"Patient", "name:contains=abc,def", nil}, // an OR: no one trigram is in every match
		{"Patient", "address:contains=spring", nil},
		{"Organization", "name:contains=clinic", nil},
		{"Patient", "name=mit", nil},
	}
	for _, tc := range tests {
		v, _ := url.ParseQuery(tc.query)
		q, err := Parse(tc.typ, v)
		if err != nil {
			t.Fatalf("%s?%s: %v", tc.typ, tc.query, err)
		}
		var grams []string
		for _, c := range q.Filter {
			if strings.HasSuffix(c.Field, "_grams") {
				if c.Op != store.OpEq || c.Field != "s_name_grams" {
					t.Errorf("%s?%s: trigram condition %v", tc.typ, tc.query, c)
				}
				grams = append(grams, c.Values[0].(string))
			}
		}
		if !slices.Equal(grams, tc.grams) {
			t.Errorf("%s?%s: trigram conditions %q, want %q", tc.typ, tc.query, grams, tc.grams)
		}
		// Only a name's own single trigram needs no test of the values.
		contains := slices.ContainsFunc(q.Filter, func(c store.Cond) bool { return c.Op == store.OpContains })
		if want := tc.query != "name:contains=Mit" && strings.Contains(tc.query, ":contains"); contains != want {
			t.Errorf("%s?%s: a contains condition: %v, want %v", tc.typ, tc.query, contains, want)
		}
	}
}

// The trigram conditions never lose a match: whatever a name contains, a
// Patient with that name meets every condition :contains adds.
func TestContainsGramsKeepEveryMatch(t *testing.T) {
	letters := []rune("abcmitsü é-'ø日本")
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteRune(letters[rng.IntN(len(letters))])
		}
		return b.String()
	}
	for range 2000 {
		family, given := word(1+rng.IntN(9)), word(1+rng.IntN(6))
		res := decode(t, `{"resourceType":"Patient","name":[{"family":`+quote(family)+`,"given":[`+quote(given)+`]}]}`)
		fields := Fields("Patient", res)
		get := func(f string) (any, bool) { v, ok := fields[f]; return v, ok }
		for _, param := range []string{"name", "family", "given"} {
			src := map[string]string{"name": given + " " + family, "family": family, "given": given}[param]
			r := []rune(src)
			i := rng.IntN(len(r))
			j := i + 1 + rng.IntN(len(r)-i)
			sub := strings.TrimSpace(string(r[i:j]))
			if sub == "" || strings.ContainsAny(sub, ",$|\\") {
				continue
			}
			q, err := Parse("Patient", url.Values{param + ":contains": {sub}})
			if err != nil {
				continue // a fragment normalising to nothing
			}
			for _, c := range q.Filter {
				if !store.Matches(c, get) {
					t.Fatalf("%s:contains=%q misses %q %q at %v (grams %q)", param, sub, given, family, c, fields["s_name_grams"])
				}
			}
		}
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
