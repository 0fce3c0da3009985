package fhir

// DropEmpty removes from a resource, in place, the values Medplum treats as
// absent, so that bodies written by Medplum's tools (the CLI's `bot create`
// sends "description": "") are accepted as Medplum accepts them.
//
// Medplum's validator reads a property whose value is null, "", {} or [] as
// not there, and its storage (core's stringify) then removes it, along with
// any object left with nothing in it. Items of an array are the exception:
// a literal null, "" or {} item is still validated, and refused, by both.
// An object item emptied by this is removed from its array (Medplum keeps a
// null in its place, which FHIR JSON forbids for complex values).
//
// What stays is validated as before; a whitespace-only string is still
// refused. Nesting deeper than maxEmptyDepth is left for the validator,
// which refuses it.
func DropEmpty(res map[string]any) {
	dropEmptyIn(res, 0)
}

const maxEmptyDepth = 256

// dropEmptyIn cleans obj's properties and reports whether obj is now empty.
func dropEmptyIn(obj map[string]any, depth int) bool {
	if depth > maxEmptyDepth {
		return false
	}
	for k, v := range obj {
		switch x := v.(type) {
		case nil:
			delete(obj, k)
		case string:
			if x == "" {
				delete(obj, k)
			}
		case map[string]any:
			if dropEmptyIn(x, depth+1) {
				delete(obj, k)
			}
		case []any:
			if kept := dropEmptyItems(x, depth+1); len(kept) == 0 {
				delete(obj, k)
			} else if len(kept) != len(x) {
				obj[k] = kept
			}
		}
	}
	return len(obj) == 0
}

// dropEmptyItems cleans the object items of an array, dropping those it
// empties; it returns arr itself when nothing was dropped.
func dropEmptyItems(arr []any, depth int) []any {
	var kept []any
	for i, item := range arr {
		m, ok := item.(map[string]any)
		if ok && len(m) > 0 && dropEmptyIn(m, depth) {
			if kept == nil {
				kept = append(make([]any, 0, len(arr)-1), arr[:i]...)
			}
			continue
		}
		if kept != nil {
			kept = append(kept, item)
		}
	}
	if kept == nil {
		return arr
	}
	return kept
}
