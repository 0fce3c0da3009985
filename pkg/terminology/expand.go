package terminology

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Limits of one $expand.
const (
	// MaxCount bounds count, and an expansion without one, as Medplum's
	// MAX_EXPANSION_SIZE does.
	MaxCount = 1000
	// FilterCount is the page of a filtered expansion without a count:
	// Medplum's size for typeahead.
	FilterCount = 10
	// MaxFilterChars bounds filter.
	MaxFilterChars = 256
	// MaxURLBytes bounds url.
	MaxURLBytes = 2048
)

// Expansion is a ValueSet resource with its expansion, the answer of
// $expand.
type Expansion struct {
	ResourceType string           `json:"resourceType"`
	URL          string           `json:"url"`
	Version      string           `json:"version,omitempty"`
	Name         string           `json:"name,omitempty"`
	Title        string           `json:"title,omitempty"`
	Status       string           `json:"status"`
	Expansion    ExpansionContent `json:"expansion"`
}

// ExpansionContent is ValueSet.expansion.
type ExpansionContent struct {
	Timestamp string     `json:"timestamp"`
	Total     int        `json:"total"`
	Offset    int        `json:"offset,omitempty"`
	Contains  []Contains `json:"contains,omitempty"`
}

// Contains is one code of ValueSet.expansion.contains.
type Contains struct {
	System  string `json:"system"`
	Code    string `json:"code"`
	Display string `json:"display,omitempty"`
}

// Expand answers ValueSet/$expand with the parameters url, filter, count
// and offset. Refusals are 400s with Medplum's wording where it has one.
func Expand(q url.Values, now time.Time) (*Expansion, error) {
	get := func(name string) (string, bool, error) {
		vs, ok := q[name]
		if !ok {
			return "", false, nil
		}
		if len(vs) != 1 {
			return "", false, fhir.BadRequest("Parameter "+name+" is given more than once", name)
		}
		return vs[0], true, nil
	}
	u, _, err := get("url")
	if err != nil {
		return nil, err
	}
	if u == "" {
		return nil, fhir.BadRequest("Missing url", "url")
	}
	if len(u) > MaxURLBytes {
		return nil, fhir.BadRequest(fmt.Sprintf("Invalid url: %d bytes, at most %d", len(u), MaxURLBytes), "url")
	}
	filter, _, err := get("filter")
	if err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(filter) > MaxFilterChars {
		return nil, fhir.BadRequest(fmt.Sprintf("Invalid filter: at most %d characters", MaxFilterChars), "filter")
	}
	filter = strings.ToLower(strings.TrimSpace(filter))
	count := MaxCount
	if filter != "" {
		count = FilterCount
	}
	if v, ok, err := get("count"); err != nil {
		return nil, err
	} else if ok {
		if count, err = strconv.Atoi(v); err != nil || count < 0 || count > MaxCount {
			return nil, fhir.BadRequest(fmt.Sprintf("Invalid count: must be an integer from 0 to %d", MaxCount), "count")
		}
	}
	offset := 0
	if v, ok, err := get("offset"); err != nil {
		return nil, err
	} else if ok {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return nil, fhir.BadRequest("Invalid offset: must be a non-negative integer", "offset")
		}
	}

	vs := Find(u)
	if vs == nil {
		return nil, fhir.BadRequest("ValueSet " + unversioned(u) + " not found")
	}
	if vs.Unexpandable != "" {
		return nil, fhir.BadRequest(fmt.Sprintf("ValueSet %s cannot be expanded: it %s", vs.URL, vs.Unexpandable))
	}
	words := strings.Fields(filter)
	var matched []Coding
	for _, c := range vs.Codes {
		if filter == "" || matches(c, filter, words) {
			matched = append(matched, c)
		}
	}
	out := &Expansion{
		ResourceType: "ValueSet", URL: vs.URL, Version: vs.Version, Name: vs.Name, Title: vs.Title, Status: vs.Status,
		Expansion: ExpansionContent{Timestamp: now.UTC().Format("2006-01-02T15:04:05.000Z"), Total: len(matched), Offset: offset},
	}
	if offset < len(matched) {
		page := matched[offset:]
		if len(page) > count {
			page = page[:count]
		}
		for _, c := range page {
			out.Expansion.Contains = append(out.Expansion.Contains, Contains(c))
		}
	}
	return out, nil
}

// matches is Medplum's filter: the code itself, or a display holding every
// word of the filter, ignoring case.
func matches(c Coding, filter string, words []string) bool {
	if strings.ToLower(c.Code) == filter {
		return true
	}
	d := strings.ToLower(c.Display)
	for _, w := range words {
		if !strings.Contains(d, w) {
			return false
		}
	}
	return true
}
