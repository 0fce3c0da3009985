package fhir

import (
	"encoding/json"
	"errors"
	"strconv"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

// Patch limits. A patch is the caller's input, and "copy" can double a
// value with each operation: twenty copies of a kilobyte would need a
// gigabyte. What copies add is bounded by the default request body limit
// (a resource bigger than that could not be sent either), and the count of
// operations keeps the work per request small; real patches hold a few.
const (
	MaxPatchOperations = 1000
	MaxPatchCopyBytes  = 8 << 20
)

// ParsePatch checks a JSON Patch (RFC 6902) body, reporting faults the way
// Medplum does. evanphx/json-patch applies it: it is the maintained Go
// implementation of the RFC, and handles test, move and copy.
func ParsePatch(body []byte) (jsonpatch.Patch, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		var v any
		if json.Unmarshal(body, &v) != nil {
			return nil, BadRequest("Content could not be parsed")
		}
		return nil, BadRequest("Patch body must be an array")
	}
	if len(raw) == 0 {
		return nil, BadRequest("Empty patch body")
	}
	if len(raw) > MaxPatchOperations {
		return nil, TooLarge("A patch may hold at most " + strconv.Itoa(MaxPatchOperations) + " operations")
	}
	p, err := jsonpatch.DecodePatch(body)
	if err != nil {
		return nil, BadRequest("Invalid patch: " + err.Error())
	}
	for i, op := range p {
		switch kind := op.Kind(); kind {
		case "add", "remove", "replace", "move", "copy", "test":
		default:
			return nil, BadRequest("Invalid patch operation: "+kind, "["+strconv.Itoa(i)+"].op")
		}
		if _, err := op.Path(); err != nil {
			return nil, BadRequest("Invalid patch path", "["+strconv.Itoa(i)+"].path")
		}
	}
	return p, nil
}

// ApplyPatch applies a parsed patch to a resource's JSON; a failing
// operation (a failed test, a missing path) is a 400, and copies that would
// add more than MaxPatchCopyBytes are a 413.
func ApplyPatch(p jsonpatch.Patch, doc []byte) (out []byte, err error) {
	// json-patch v5.9.11 panics on some "test" operations comparing against
	// a null value (found by FuzzPatch; seed kept in testdata): a patch is
	// the caller's input, so its failure is a 400, never a 500.
	defer func() {
		if recover() != nil {
			out, err = nil, BadRequest("Patch failed: invalid operation")
		}
	}()
	opts := jsonpatch.NewApplyOptions()
	opts.AccumulatedCopySizeLimit = MaxPatchCopyBytes
	out, err = p.ApplyWithOptions(doc, opts)
	var tooBig *jsonpatch.AccumulatedCopySizeError
	switch {
	case errors.As(err, &tooBig):
		return nil, TooLarge("Patch failed: its copy operations would add more than " + strconv.Itoa(MaxPatchCopyBytes>>20) + " MiB")
	case err != nil:
		return nil, BadRequest("Patch failed: " + err.Error())
	}
	return out, nil
}
