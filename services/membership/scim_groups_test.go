package membership

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/pinion-health/pinion/pkg/scimwire"
	"github.com/pinion-health/pinion/services/membership/scimproto"
)

func TestGroupOperation(t *testing.T) {
	for _, tc := range []struct {
		name, op, path, value string
		ids                   []string
		all                   bool
		err                   error
		scimType              string
	}{
		{name: "Okta adds members", op: "add", path: "members", value: `[{"value":"m1"},{"value":"m2"}]`, ids: []string{"m1", "m2"}},
		{name: "Entra removes one by filter", op: "remove", path: `members[value eq "m1"]`, ids: []string{"m1"}},
		{name: "remove every member", op: "remove", path: "members", all: true},
		{name: "path-less members", op: "replace", value: `{"members":[{"value":"m3"}]}`, ids: []string{"m3"}},
		{name: "Entra echoes the name", op: "replace", value: `{"id":"g1","displayName":"Nurses"}`, err: errNoMembers},
		{name: "a new name is refused", op: "replace", value: `{"displayName":"Doctors"}`, scimType: scimwire.Mutability},
		{name: "another attribute is refused", op: "replace", value: `{"externalId":"x"}`, scimType: scimwire.Mutability},
		{name: "members by another attribute", op: "remove", path: `members[display eq "Ada"]`, scimType: scimwire.InvalidPath},
		{name: "not a members path", op: "replace", path: "displayName", value: `"Doctors"`, scimType: scimwire.InvalidPath},
		{name: "members not a list", op: "add", path: "members", value: `{"value":"m1"}`, scimType: scimwire.InvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, all, err := groupOperation(scimproto.Operation{Op: tc.op, Path: tc.path, Value: json.RawMessage(tc.value)}, "Nurses")
			var se *scimwire.Error
			switch {
			case tc.scimType != "":
				if !errors.As(err, &se) || se.ScimType != tc.scimType {
					t.Fatalf("err %v, want scimType %s", err, tc.scimType)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case !slices.Equal(ids, tc.ids) || all != tc.all:
				t.Fatalf("ids %v all %v, want %v %v", ids, all, tc.ids, tc.all)
			}
		})
	}
}
