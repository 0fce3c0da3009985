package presign

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Resolver says whether the caller may read Binary id (at versionID, or
// its current version when versionID is ""), and which version to sign.
// ok false, with no error, leaves the url a plain reference.
type Resolver func(ctx context.Context, id, versionID string) (vid string, ok bool, err error)

// Rewriter turns the attachment urls of one answer into signed URLs,
// asking its resolver once per url.
type Rewriter struct {
	s       *Signer
	resolve Resolver
	cache   map[string]string
	// unsign turns urls back into references instead (Unsigner).
	unsign bool
}

// Rewriter is a rewriter for one answer to one caller.
func (s *Signer) Rewriter(resolve Resolver) *Rewriter {
	return &Rewriter{s: s, resolve: resolve, cache: map[string]string{}}
}

// Unsigner is a rewriter for what a client writes: as Medplum stores
// them, attachment urls that name a Binary in any form (a signed URL
// read earlier and sent back, the API's URL, a versioned reference)
// become "Binary/<id>", so no URL that expires is stored. Binaries are
// left as written.
func (s *Signer) Unsigner() *Rewriter {
	return &Rewriter{s: s, cache: map[string]string{}, unsign: true}
}

// Rewrite returns body (a resource or a Bundle, as JSON) with, as in
// Medplum, every "url" or "path" that names a Binary ("Binary/<id>",
// "<base>fhir/R4/Binary/<id>", an earlier storage URL; a version with
// /_history/<vid>) replaced by a signed URL when the caller may read that
// Binary, and by "Binary/<id>" when not. A Binary's own url is its signed
// URL: whoever is answered a Binary has read it. Nothing inside a Binary
// is rewritten.
func (rw *Rewriter) Rewrite(ctx context.Context, body []byte) ([]byte, error) {
	if !bytes.Contains(body, []byte(`"Binary`)) && !bytes.Contains(body, []byte("/fhir/R4/Binary/")) &&
		!bytes.Contains(body, []byte(rw.s.Prefix())) {
		return body, nil // nothing to sign: the common case, left byte for byte
	}
	// Parsed as fhir.Decode parses a resource, so that a body it would
	// refuse is refused here too rather than rewritten into one it takes.
	if err := fhir.CheckDepth(body, fhir.MaxDepth); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("presign: data after the JSON value")
	}
	changed, err := rw.value(ctx, &v)
	if err != nil || !changed {
		return body, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// value rewrites v in place and reports whether anything changed.
func (rw *Rewriter) value(ctx context.Context, v *any) (bool, error) {
	switch t := (*v).(type) {
	case []any:
		changed := false
		for i := range t {
			c, err := rw.value(ctx, &t[i])
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	case map[string]any:
		if t["resourceType"] == "Binary" {
			if rw.unsign {
				return false, nil
			}
			return rw.binary(ctx, t)
		}
		changed := false
		for k, e := range t {
			if s, ok := e.(string); ok && (k == "url" || k == "path") {
				signed, err := rw.url(ctx, s)
				if err != nil {
					return false, err
				}
				if signed != s {
					t[k], changed = signed, true
				}
				continue
			}
			c, err := rw.value(ctx, &e)
			if err != nil {
				return false, err
			}
			if c {
				t[k], changed = e, true
			}
		}
		return changed, nil
	}
	return false, nil
}

// binary sets a Binary's url to its own signed URL.
func (rw *Rewriter) binary(ctx context.Context, b map[string]any) (bool, error) {
	id, _ := b["id"].(string)
	meta, _ := b["meta"].(map[string]any)
	vid, _ := meta["versionId"].(string)
	if !validPart(id) || !validPart(vid) {
		return false, nil
	}
	signed, err := rw.s.URL(ctx, id, vid)
	if err != nil {
		return false, err
	}
	b["url"] = signed
	return true, nil
}

// url is the rewritten form of one url value.
func (rw *Rewriter) url(ctx context.Context, u string) (string, error) {
	id, vid, ok := rw.binaryRef(u)
	if !ok {
		return u, nil
	}
	if out, ok := rw.cache[u]; ok {
		return out, nil
	}
	out := "Binary/" + id
	if rw.unsign {
		return out, nil
	}
	at, readable, err := rw.resolve(ctx, id, vid)
	if err != nil {
		return "", err
	}
	if readable {
		if out, err = rw.s.URL(ctx, id, at); err != nil {
			return "", err
		}
	}
	rw.cache[u] = out
	return out, nil
}

// binaryRef reads the Binary a url names, in the three forms Medplum
// reads (a reference, the FHIR API's URL, a storage URL).
func (rw *Rewriter) binaryRef(u string) (id, vid string, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(u, "Binary/"):
		rest = u[len("Binary/"):]
	case strings.HasPrefix(u, rw.s.base+"fhir/R4/Binary/"):
		rest = u[len(rw.s.base+"fhir/R4/Binary/"):]
	case strings.HasPrefix(u, rw.s.Prefix()):
		rest, _, _ = strings.Cut(u[len(rw.s.Prefix()):], "?")
		id, vid, _ = strings.Cut(rest, "/")
		return id, vid, validPart(id) && (vid == "" || validPart(vid))
	default:
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 1 && validPart(parts[0]):
		return parts[0], "", true
	case len(parts) == 3 && parts[1] == "_history" && validPart(parts[0]) && validPart(parts[2]):
		return parts[0], parts[2], true
	}
	return "", "", false
}

// validPart is a FHIR id's shape (1 to 64 of A-Z a-z 0-9 - .), which is
// all an id or a version may be in a signed path.
func validPart(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
