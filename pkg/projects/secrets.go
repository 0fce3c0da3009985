package projects

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// ParseSecrets checks a secrets body (a project's or a bot's): each entry a name, unique, and
// exactly one value of the type its field names. Numbers keep the digits
// they were sent with.
func ParseSecrets(body []byte) ([]any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var in []map[string]any
	// Anything after the array is refused, a stray `]` too (which d.More
	// would let through, and so clear the secrets).
	if err := d.Decode(&in); err != nil {
		return nil, fhir.BadRequest("Secrets must be an array of {name, value[x]}")
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, fhir.BadRequest("Secrets must be an array of {name, value[x]}")
	}
	seen := map[string]bool{}
	secrets := make([]any, 0, len(in))
	for i, sec := range in {
		expr := fmt.Sprintf("[%d]", i)
		name, _ := sec["name"].(string)
		if strings.TrimSpace(name) == "" {
			return nil, fhir.BadRequest("Secret name is required", expr+".name")
		}
		if seen[name] {
			return nil, fhir.BadRequest("Duplicate secret name: "+name, expr+".name")
		}
		seen[name] = true
		values := 0
		// In key order, so that of two bad fields the same one is named each time.
		for _, k := range slices.Sorted(maps.Keys(sec)) {
			if k == "name" {
				continue
			}
			if !ValidSecretValue(k, sec[k]) {
				if t := secretTypes[k]; t != "" {
					return nil, fhir.BadRequest(k+" must be "+t, expr+"."+k)
				}
				return nil, fhir.BadRequest("Unknown secret field: "+k, expr+"."+k)
			}
			values++
		}
		if values != 1 {
			return nil, fhir.BadRequest("A secret has exactly one value", expr)
		}
		secrets = append(secrets, sec)
	}
	return secrets, nil
}

// secretTypes are the value fields of a ProjectSetting, as described to a
// caller who sent the wrong type.
var secretTypes = map[string]string{
	"valueString": "a string", "valueBoolean": "true or false",
	"valueDecimal": "a number", "valueInteger": "a 32-bit integer",
}

// ValidSecretValue reports whether v is a value of the ProjectSetting
// field named; false for any other field.
func ValidSecretValue(field string, v any) bool {
	switch field {
	case "valueString":
		s, ok := v.(string)
		return ok && s != ""
	case "valueBoolean":
		_, ok := v.(bool)
		return ok
	case "valueDecimal":
		_, ok := v.(json.Number)
		return ok
	case "valueInteger":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(string(n), 10, 32)
		return err == nil
	}
	return false
}
