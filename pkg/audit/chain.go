package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// ChainURL is the extension that chains a project's AuditEvents: each
// carries its place (seq), its predecessor's digest (prev), the event's
// own id (event) and its digest, the SHA-256 of prev and the event's JSON
// without meta and without the digest itself. Editing, deleting or
// reordering a stored event breaks the chain where it happened.
const ChainURL = "https://pinion.health/fhir/StructureDefinition/audit-chain"

// Link is an event's place in its project's chain.
type Link struct {
	Seq    int64  `json:"seq"`
	Prev   string `json:"prev,omitempty"`
	Event  string `json:"event"`
	Digest string `json:"digest"`
}

// ID is the AuditEvent id of a project's seq-th event ("" for the
// server's own): its place, as the repository reads it (repo.TrailID).
func ID(project string, seq int64) string { return repo.TrailID(project, seq) }

// sealRendered puts r at its place in project's chain, after prev, and
// returns its link: r's JSON is the map's that the digest covers and
// linkOf reads back (rendered.go).
func sealRendered(r *rendered, project string, seq int64, prev, event string) Link {
	l := Link{Seq: seq, Prev: prev, Event: event}
	r.ID = ID(project, seq)
	r.Meta = nil
	r.Extension = []renderedChain{renderedLink(l)}
	b, _ := json.Marshal(r) // strings and numbers: cannot fail
	l.Digest = digestJSON(prev, b)
	r.Extension = []renderedChain{renderedLink(l)}
	return l
}

// renderedLink is the chain's extension of l.
func renderedLink(l Link) renderedChain {
	ext := []renderedExt{{URL: "seq", ValueInteger: l.Seq}, {URL: "event", ValueString: l.Event}}
	if l.Prev != "" {
		ext = append(ext, renderedExt{URL: "prev", ValueString: l.Prev})
	}
	if l.Digest != "" {
		ext = append(ext, renderedExt{URL: "digest", ValueString: l.Digest})
	}
	return renderedChain{URL: ChainURL, Extension: ext}
}

// digest is the SHA-256 of prev and res's JSON (keys sorted, as
// encoding/json writes a map), hex.
func digest(prev string, res map[string]any) string {
	b, _ := json.Marshal(res)
	return digestJSON(prev, b)
}

// digestJSON is digest of a resource already written as JSON.
func digestJSON(prev string, b []byte) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{'\n'})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// linkOf reads a stored event's link and recomputes its digest from what
// is stored: equal to the link's Digest unless the event was edited.
func linkOf(raw []byte) (stored Link, computed string, err error) {
	var res map[string]any
	if err := json.Unmarshal(raw, &res); err != nil {
		return Link{}, "", err
	}
	delete(res, "meta")
	fhir.DropEmpty(res)
	exts, _ := res["extension"].([]any)
	var kept []any
	for _, e := range exts {
		m, _ := e.(map[string]any)
		if m == nil || m["url"] != ChainURL {
			kept = append(kept, e)
			continue
		}
		inner, _ := m["extension"].([]any)
		var rest []any
		for _, x := range inner {
			xm, _ := x.(map[string]any)
			switch xm["url"] {
			case "seq":
				f, _ := xm["valueInteger"].(float64)
				stored.Seq = int64(f)
			case "prev":
				stored.Prev, _ = xm["valueString"].(string)
			case "event":
				stored.Event, _ = xm["valueString"].(string)
			case "digest":
				stored.Digest, _ = xm["valueString"].(string)
				continue
			}
			rest = append(rest, x)
		}
		kept = append(kept, map[string]any{"url": ChainURL, "extension": rest})
	}
	if stored.Seq == 0 {
		return Link{}, "", fmt.Errorf("not a chained AuditEvent")
	}
	res["extension"] = kept
	return stored, digest(stored.Prev, res), nil
}
