package bus

import (
	"net/url"
	"strings"
)

// FHIRRoute resolves a request relative to the FHIR base ("Patient/123",
// "/Patient?name=x", "Bot/<id>/$execute") to its service subject, route
// parameters and query — the gateway's FHIR routes, for calls that do not
// come over HTTP (a bot's medplum client). ok is false for an unknown route.
func FHIRRoute(method, rel string) (subject string, params map[string]string, q url.Values, rawQuery string, ok bool) {
	rel = strings.TrimPrefix(rel, "/")
	path, rawQuery, _ := strings.Cut(rel, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, nil, "", false
	}
	seg := strings.Split(strings.TrimSuffix(path, "/"), "/")
	if path == "" {
		seg = nil
	}
	params = map[string]string{}
	if len(seg) > 0 {
		params["type"] = seg[0]
	}
	if len(seg) > 1 {
		params["id"] = seg[1]
	}
	m := strings.ToUpper(method)
	switch {
	case len(seg) == 0 && m == "POST":
		return SubjBatch, params, q, rawQuery, true
	case len(seg) == 2 && seg[0] == "Bot" && seg[1] == "$execute" && (m == "GET" || m == "POST"):
		delete(params, "id")
		return SubjExecute, params, q, rawQuery, true
	case len(seg) == 3 && seg[0] == "Bot" && seg[2] == "$execute" && (m == "GET" || m == "POST"):
		return SubjExecute, params, q, rawQuery, true
	case len(seg) == 2 && seg[1] == "$validate" && m == "POST":
		delete(params, "id")
		return SubjValidate, params, q, rawQuery, true
	case len(seg) == 1 && m == "GET":
		return SubjSearch, params, q, rawQuery, true
	case len(seg) == 2 && seg[1] == "_search" && m == "POST":
		delete(params, "id")
		return SubjSearch, params, q, rawQuery, true
	case len(seg) == 1 && m == "POST":
		return SubjCreate, params, q, rawQuery, true
	case len(seg) == 1 && m == "PUT":
		return SubjUpdate, params, q, rawQuery, true
	case len(seg) == 2 && m == "GET":
		return SubjRead, params, q, rawQuery, true
	case len(seg) == 2 && m == "PUT":
		return SubjUpdate, params, q, rawQuery, true
	case len(seg) == 2 && m == "PATCH":
		return SubjPatch, params, q, rawQuery, true
	case len(seg) == 2 && m == "DELETE":
		return SubjDelete, params, q, rawQuery, true
	case len(seg) == 3 && seg[2] == "_history" && m == "GET":
		return SubjHistory, params, q, rawQuery, true
	case len(seg) == 4 && seg[2] == "_history" && m == "GET":
		params["vid"] = seg[3]
		return SubjVRead, params, q, rawQuery, true
	}
	return "", nil, nil, "", false
}
