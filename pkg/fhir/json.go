package fhir

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// MaxDepth bounds JSON nesting: deeper documents are refused before they
// cost anything to walk.
const MaxDepth = 64

// Decode parses a JSON object keeping numbers exact (json.Number), as FHIR
// decimals require. Bad JSON is 400 "Content could not be parsed".
func Decode(b []byte) (map[string]any, error) {
	if err := CheckDepth(b, MaxDepth); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, BadRequest("Content could not be parsed")
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, BadRequest("Content could not be parsed")
	}
	return m, nil
}

// CheckDepth refuses JSON nested deeper than max (400) by scanning its
// brackets outside strings: cheap, and run before any parser recurses.
func CheckDepth(b []byte, max int) error {
	depth, inStr, esc := 0, false, false
	for _, c := range b {
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				return BadRequest("Content could not be parsed: nested too deeply")
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// Reference is a FHIR reference.
type Reference struct {
	Reference string `json:"reference,omitempty"`
	Display   string `json:"display,omitempty"`
}

// SplitReference splits "Type/id" (ignoring any base URL or version).
func SplitReference(ref string) (typ, id string, ok bool) {
	if i := strings.Index(ref, "/_history/"); i >= 0 {
		ref = ref[:i]
	}
	parts := strings.Split(ref, "/")
	if len(parts) < 2 {
		return "", "", false
	}
	typ, id = parts[len(parts)-2], parts[len(parts)-1]
	return typ, id, typ != "" && id != ""
}

// Bundle is a FHIR Bundle with raw resources.
type Bundle struct {
	ResourceType string        `json:"resourceType"`
	ID           string        `json:"id,omitempty"`
	Type         string        `json:"type"`
	Total        *int          `json:"total,omitempty"`
	Link         []BundleLink  `json:"link,omitempty"`
	Entry        []BundleEntry `json:"entry,omitempty"`
}

// Encode returns the bundle as JSON, with each entry's resource copied in
// as it is. json.Marshal would scan and compact every byte of every
// resource again (a tenth of a search's time), so the resources must be
// valid, compact JSON: what the store holds, as json.Marshal wrote it.
func (b *Bundle) Encode() ([]byte, error) {
	head := *b
	head.Entry = nil
	out, err := json.Marshal(head)
	if err != nil || len(b.Entry) == 0 {
		return out, err
	}
	out = append(out[:len(out)-1], `,"entry":[`...) // reopen the object
	for i, e := range b.Entry {
		if i > 0 {
			out = append(out, ',')
		}
		res := e.Resource
		e.Resource = nil
		rest, err := json.Marshal(e) // {"fullUrl":…,"search":…}, or {}
		if err != nil {
			return nil, err
		}
		if len(res) == 0 {
			out = append(out, rest...)
			continue
		}
		out = append(out, `{"resource":`...)
		out = append(out, res...)
		if len(rest) > 2 {
			out = append(out, ',')
			out = append(out, rest[1:]...)
		} else {
			out = append(out, '}')
		}
	}
	return append(out, "]}"...), nil
}

// BundleLink is one Bundle.link.
type BundleLink struct {
	Relation string `json:"relation"`
	URL      string `json:"url"`
}

// BundleEntry is one Bundle.entry.
type BundleEntry struct {
	FullURL  string          `json:"fullUrl,omitempty"`
	Resource json.RawMessage `json:"resource,omitempty"`
	Search   *struct {
		Mode string `json:"mode"`
	} `json:"search,omitempty"`
	Request *struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	} `json:"request,omitempty"`
	Response *struct {
		Status       string `json:"status"`
		LastModified string `json:"lastModified,omitempty"`
	} `json:"response,omitempty"`
}
