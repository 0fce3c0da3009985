package botexec

import (
	"context"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// host carries a bot's medplum calls to the services over NATS, as the
// identity the bot runs as: its own membership's access policy applies.
type host struct {
	s         *Service
	principal *bus.Principal
	requestID string
	depth     int // the bot's place in a chain of bots running bots
}

// Request implements sandbox.Host.
func (h *host) Request(ctx context.Context, method, path string, body []byte, contentType string) (int, string, []byte, error) {
	subject, req, ok := h.request(method, path, body, contentType)
	if !ok {
		e := fhir.NotFound()
		return e.Status, bus.FHIRContentType, e.JSON(), nil
	}
	resp, err := bus.Call(ctx, h.s.nc, subject, req)
	if err != nil {
		fe := fhir.AsError(err)
		return fe.Status, bus.FHIRContentType, fe.JSON(), nil
	}
	return resp.Status, resp.Header["Content-Type"], resp.Body, nil
}

// request is a bot's call as the request to send and its subject; ok is
// false for a path that is no FHIR route. A body without a content type is
// FHIR JSON, as Medplum's client sends it.
func (h *host) request(method, path string, body []byte, contentType string) (subject string, req *bus.Request, ok bool) {
	route, params, q, raw, ok := bus.FHIRRoute(method, path)
	if !ok {
		return "", nil, false
	}
	if contentType == "" && len(body) > 0 {
		contentType = "application/fhir+json"
	}
	return route.Subject, &bus.Request{
		Method: method, Path: "/fhir/R4/" + path, Query: q, RawQuery: raw, Params: params,
		Header: map[string]string{"Content-Type": contentType}, Body: body,
		Principal: h.principal, RequestID: h.requestID, BotDepth: h.depth,
	}, true
}
