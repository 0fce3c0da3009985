package access

import (
	"errors"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Forms send the fields left blank as "": CheckContent reads them as
// absent, as the write that follows stores them, and checks what is there.
func TestCheckContentBlankFields(t *testing.T) {
	cases := []struct {
		name, typ string
		res, want map[string]any
		refused   string
	}{
		{"blank redirect and launch URIs", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "name": "c", "redirectUri": "", "launchUri": "", "description": ""},
			map[string]any{"resourceType": "ClientApplication", "name": "c"}, ""},
		{"blank criteria", "AccessPolicy",
			map[string]any{"resourceType": "AccessPolicy", "resource": []any{map[string]any{"resourceType": "Patient", "criteria": ""}}},
			map[string]any{"resourceType": "AccessPolicy", "resource": []any{map[string]any{"resourceType": "Patient"}}}, ""},
		{"blank secret", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "secret": ""},
			map[string]any{"resourceType": "ClientApplication"}, ""},
		{"a bad redirect URI", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "redirectUri": "ftp://example.com/cb"}, nil, "Invalid redirect URI"},
		{"a secret", "ClientApplication",
			map[string]any{"resourceType": "ClientApplication", "secret": "s"}, nil, "is set by the server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckContent(c.typ, c.res)
			if c.refused != "" {
				if !errors.Is(err, fhir.ErrBadRequest) {
					t.Fatalf("%v, want 400 %q", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.res, c.want) {
				t.Fatalf("%v, want %v", c.res, c.want)
			}
		})
	}
}
