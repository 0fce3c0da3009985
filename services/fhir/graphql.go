package fhirsvc

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/fhir/graphql"
)

// graphQL is POST /fhir/R4/$graphql, Medplum's FHIR GraphQL: the query runs
// through this service's own read, search, create, update and delete
// handlers as the caller, so every node meets the same access checks as
// the REST request it stands for (graphql.Store).
func (s *Service) graphQL(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	if !isMediaType(r.Get("Content-Type"), "application/json", "application/fhir+json") {
		return nil, fhir.UnsupportedMediaType()
	}
	var req graphql.Request
	if err := json.Unmarshal(r.Body, &req); err != nil {
		return nil, fhir.BadRequest("Invalid JSON body: expected {query, operationName, variables}")
	}
	st := &graphStore{s: s, r: r}
	// One event for the query, naming every patient its reads touched.
	gctx, record := s.gatherAccesses(ctx)
	out, err := graphql.Execute(gctx, st, req, graphql.DefaultLimits)
	if err != nil {
		return nil, err
	}
	if err := record(ctx, r, audit.PatientSearch, []audit.Entity{{Query: "$graphql " + req.Query}}); err != nil {
		return nil, err
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	if len(body) > s.replyBudget() {
		return nil, fhir.TooLarge("The GraphQL answer is too large to send at once; ask for fewer resources (_count) or fields")
	}
	resp := &bus.Response{Status: 200, Header: map[string]string{"Content-Type": bus.JSONContentType}, Body: body}
	if st.session != "" {
		resp.Header[bus.SessionHeader] = st.session
	}
	return resp, nil
}

// graphStore answers a query's reads and writes with the REST handlers,
// as the request's caller.
type graphStore struct {
	s *Service
	r *bus.Request
	// session is the latest session-bucket revision a write depended on,
	// passed on so the gateway's view catches up as after the REST write.
	mu      sync.Mutex
	session string
}

func (g *graphStore) call(ctx context.Context, h bus.Handler, method, typ, id string, q url.Values, body map[string]any) (*bus.Response, error) {
	sub := &bus.Request{
		Method: method, Path: "/fhir/R4/" + typ, Query: q, RawQuery: q.Encode(),
		Params: map[string]string{"type": typ}, Principal: g.r.Principal, RequestID: g.r.RequestID,
		Remote: g.r.Remote, Trace: g.r.Trace, BotDepth: g.r.BotDepth,
		Header: map[string]string{"Content-Type": "application/fhir+json"},
	}
	if id != "" {
		sub.Params["id"] = id
		sub.Path += "/" + id
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fhir.BadRequest("Invalid resource")
		}
		sub.Body = b
	}
	resp, err := h(ctx, sub)
	if err != nil {
		return nil, err
	}
	if v := resp.Header[bus.SessionHeader]; v != "" {
		g.mu.Lock()
		g.session = v
		g.mu.Unlock()
	}
	return resp, nil
}

func decodeResource(resp *bus.Response) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		return nil, fhir.Internal()
	}
	return m, nil
}

func (g *graphStore) Read(ctx context.Context, typ, id string) (map[string]any, error) {
	resp, err := g.call(ctx, g.s.read, "GET", typ, id, url.Values{}, nil)
	if err != nil {
		return nil, err
	}
	return decodeResource(resp)
}

func (g *graphStore) Search(ctx context.Context, typ string, q url.Values) ([]map[string]any, error) {
	resp, err := g.call(ctx, g.s.search, "GET", typ, "", q, nil)
	if err != nil {
		return nil, err
	}
	var b struct {
		Entry []struct {
			Resource map[string]any `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, fhir.Internal()
	}
	out := make([]map[string]any, 0, len(b.Entry))
	for _, e := range b.Entry {
		out = append(out, e.Resource)
	}
	return out, nil
}

func (g *graphStore) Create(ctx context.Context, typ string, res map[string]any) (map[string]any, error) {
	resp, err := g.call(ctx, g.s.create, "POST", typ, "", url.Values{}, res)
	if err != nil {
		return nil, err
	}
	return decodeResource(resp)
}

func (g *graphStore) Update(ctx context.Context, typ, id string, res map[string]any) (map[string]any, error) {
	resp, err := g.call(ctx, g.s.update, "PUT", typ, id, url.Values{}, res)
	if err != nil {
		return nil, err
	}
	return decodeResource(resp)
}

func (g *graphStore) Delete(ctx context.Context, typ, id string) error {
	_, err := g.call(ctx, g.s.delete, "DELETE", typ, id, url.Values{}, nil)
	return err
}
