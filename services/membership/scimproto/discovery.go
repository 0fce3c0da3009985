package scimproto

// The discovery resources (RFC 7644 §4): what this server supports, so a
// client such as Okta or Entra ID asks only for that.

// ServiceProviderConfig describes the server's SCIM support; base is the
// server's base URL, ending in "/".
func ServiceProviderConfig(base string) map[string]any {
	no := map[string]any{"supported": false}
	return map[string]any{
		"schemas":          []string{"urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"},
		"documentationUri": "https://github.com/pinion-health/pinion/blob/main/docs/scim.md",
		"patch":            map[string]any{"supported": true},
		"bulk":             map[string]any{"supported": false, "maxOperations": 0, "maxPayloadSize": 0},
		"filter":           map[string]any{"supported": true, "maxResults": MaxCount},
		"changePassword":   no,
		"sort":             no,
		"etag":             no,
		"authenticationSchemes": []map[string]any{
			{"type": "oauthbearertoken", "name": "OAuth Bearer Token", "primary": true,
				"description": "An access token of a project admin or of a client application with an admin membership"},
			{"type": "httpbasic", "name": "HTTP Basic",
				"description": "A client application's id and secret, the application having an admin membership"},
		},
		"meta": map[string]any{"resourceType": "ServiceProviderConfig", "location": base + "scim/v2/ServiceProviderConfig"},
	}
}

// ResourceTypes lists the resource types served.
func ResourceTypes(base string) []map[string]any {
	return []map[string]any{
		{"schemas": []string{"urn:ietf:params:scim:schemas:core:2.0:ResourceType"}, "id": "User", "name": "User",
			"endpoint": "/Users", "description": "A person's membership of the project", "schema": UserSchema,
			"meta": map[string]any{"resourceType": "ResourceType", "location": base + "scim/v2/ResourceTypes/User"}},
		{"schemas": []string{"urn:ietf:params:scim:schemas:core:2.0:ResourceType"}, "id": "Group", "name": "Group",
			"endpoint": "/Groups", "description": "An access policy of the project; its members are the memberships it applies to", "schema": GroupSchema,
			"meta": map[string]any{"resourceType": "ResourceType", "location": base + "scim/v2/ResourceTypes/Group"}},
	}
}

// attr describes one attribute of a schema (RFC 7643 §7).
func attr(name, typ string, multi, required bool, mutability string, caseExact bool, sub ...map[string]any) map[string]any {
	a := map[string]any{"name": name, "type": typ, "multiValued": multi, "required": required,
		"mutability": mutability, "returned": "default", "caseExact": caseExact, "uniqueness": "none"}
	if len(sub) > 0 {
		a["subAttributes"] = sub
	}
	return a
}

// Schemas lists the User and Group schemas, as far as Pinion keeps them.
func Schemas(base string) []map[string]any {
	user := []map[string]any{
		func() map[string]any {
			a := attr("userName", "string", false, true, "readWrite", false)
			a["uniqueness"] = "server"
			return a
		}(),
		attr("externalId", "string", false, false, "readWrite", true),
		attr("userType", "string", false, false, "immutable", true),
		attr("name", "complex", false, false, "readWrite", false,
			attr("givenName", "string", false, false, "readWrite", false),
			attr("familyName", "string", false, false, "readWrite", false),
			attr("formatted", "string", false, false, "readOnly", false)),
		attr("emails", "complex", true, false, "readWrite", false,
			attr("value", "string", false, false, "readWrite", false),
			attr("type", "string", false, false, "readWrite", false),
			attr("primary", "boolean", false, false, "readWrite", false)),
		attr("active", "boolean", false, false, "readWrite", false),
	}
	group := []map[string]any{
		attr("displayName", "string", false, true, "readOnly", false),
		attr("members", "complex", true, false, "readWrite", false,
			attr("value", "string", false, false, "immutable", true),
			attr("display", "string", false, false, "readOnly", false)),
	}
	schema := func(id, name string, attrs []map[string]any) map[string]any {
		return map[string]any{"schemas": []string{"urn:ietf:params:scim:schemas:core:2.0:Schema"}, "id": id, "name": name, "attributes": attrs,
			"meta": map[string]any{"resourceType": "Schema", "location": base + "scim/v2/Schemas/" + id}}
	}
	return []map[string]any{schema(UserSchema, "User", user), schema(GroupSchema, "Group", group)}
}

// ListResponse is a page of resources (RFC 7644 §3.4.2).
func ListResponse[T any](total, start int, items []T) map[string]any {
	if items == nil {
		items = []T{}
	}
	return map[string]any{"schemas": []string{ListResponseSchema}, "totalResults": total, "startIndex": start,
		"itemsPerPage": len(items), "Resources": items}
}
