package audit

// The chain sealed as a map, as linkOf reads it back: what tests rewrite
// stored events with (a tamperer recomputing digests), and hold the
// writer's rendered sealing to.

// seal puts res at its place in project's chain, after prev, and returns
// its link. res must be as it will be stored (empty values dropped).
func seal(res map[string]any, project string, seq int64, prev, event string) Link {
	l := Link{Seq: seq, Prev: prev, Event: event}
	res["id"] = ID(project, seq)
	res["extension"] = []any{chainExtension(l)}
	l.Digest = digest(prev, res)
	res["extension"] = []any{chainExtension(l)}
	return l
}

func chainExtension(l Link) map[string]any {
	ext := []any{
		map[string]any{"url": "seq", "valueInteger": l.Seq},
		map[string]any{"url": "event", "valueString": l.Event},
	}
	if l.Prev != "" {
		ext = append(ext, map[string]any{"url": "prev", "valueString": l.Prev})
	}
	if l.Digest != "" {
		ext = append(ext, map[string]any{"url": "digest", "valueString": l.Digest})
	}
	return map[string]any{"url": ChainURL, "extension": ext}
}
