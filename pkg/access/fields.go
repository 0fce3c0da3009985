package access

import (
	"reflect"
	"slices"
	"strings"
)

// Field paths of hiddenFields and readonlyFields are dotted element names
// ("birthDate", "identifier.value", "meta.author"); a path runs through
// arrays, applying to every element.

func splitPath(p string) []string { return strings.Split(p, ".") }

// removePath deletes what a path names.
func removePath(m map[string]any, path []string) {
	if len(path) == 0 || m == nil {
		return
	}
	if len(path) == 1 {
		delete(m, path[0])
		return
	}
	switch v := m[path[0]].(type) {
	case map[string]any:
		removePath(v, path[1:])
	case []any:
		for _, x := range v {
			if o, ok := x.(map[string]any); ok {
				removePath(o, path[1:])
			}
		}
	}
}

// restorePath makes what a path names in after what it is in before
// (absent when before has none), so a writer can neither change nor remove
// a field it cannot see. Through arrays, elements are paired by position;
// an element before lacks loses the field.
func restorePath(after, before map[string]any, path []string) {
	if len(path) == 0 || after == nil {
		return
	}
	k := path[0]
	if len(path) == 1 {
		if v, ok := before[k]; ok {
			after[k] = v
		} else {
			delete(after, k)
		}
		return
	}
	switch v := after[k].(type) {
	case map[string]any:
		b, _ := before[k].(map[string]any)
		restorePath(v, b, path[1:])
	case []any:
		bs, _ := before[k].([]any)
		for i, x := range v {
			o, ok := x.(map[string]any)
			if !ok {
				continue
			}
			var b map[string]any
			if i < len(bs) {
				b, _ = bs[i].(map[string]any)
			}
			restorePath(o, b, path[1:])
		}
	}
}

// valueAt collects what a path names: the value itself, or through arrays
// the list of the elements' values; nil when absent.
func valueAt(m map[string]any, path []string) any {
	if len(path) == 0 || m == nil {
		return nil
	}
	v, ok := m[path[0]]
	if !ok {
		return nil
	}
	if len(path) == 1 {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		return valueAt(x, path[1:])
	case []any:
		var out []any
		for _, e := range x {
			if o, ok := e.(map[string]any); ok {
				if y := valueAt(o, path[1:]); y != nil {
					out = append(out, y)
				}
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return nil
}

// serverMeta are the meta elements the server sets on every write; they
// never count as a change of a read-only field.
var serverMeta = []string{"versionId", "lastUpdated", "project", "author", "account", "compartment"}

// changed reports whether a write changes what path names.
func changed(before, after map[string]any, path []string) bool {
	if path[0] == "meta" && len(path) > 1 && slices.Contains(serverMeta, path[1]) {
		return false
	}
	a, b := valueAt(after, path), valueAt(before, path)
	if path[0] == "meta" {
		a, b = withoutServerMeta(a, len(path)), withoutServerMeta(b, len(path))
	}
	return !reflect.DeepEqual(a, b)
}

// withoutServerMeta drops server-set elements from the value of "meta".
func withoutServerMeta(v any, depth int) any {
	m, ok := v.(map[string]any)
	if depth != 1 || !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, x := range m {
		out[k] = x
	}
	for _, k := range serverMeta {
		delete(out, k)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
