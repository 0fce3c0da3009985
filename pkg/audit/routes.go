package audit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// Route is what a route's requests record: the kind of event, the action
// when it is not the kind's own, and whether a refused request is
// recorded too (a sign-in that fails is an event; a refused invite is
// not).
type Route struct {
	Kind     Kind
	Action   string
	Refusals bool
}

// Wrap has each endpoint that routes names (by its route, as declared
// with bus.Handle) record its request before it is answered: once it
// succeeds, and when it is refused if the Route says so. The routes stay
// declared as they are, one line beside their handler.
func (r *Recorder) Wrap(eps []bus.Endpoint, routes map[string]Route, log *slog.Logger) []bus.Endpoint {
	if r == nil {
		return eps
	}
	for i, e := range eps {
		rt, ok := routes[e.Route]
		if !ok {
			continue
		}
		h := e.Handler
		eps[i].Handler = func(ctx context.Context, req *bus.Request) (*bus.Response, error) {
			n := &note{}
			resp, err := h(context.WithValue(ctx, noteKey{}, n), req)
			refused, failed := outcomeOf(resp, err)
			if failed || refused && !rt.Refusals {
				return resp, err
			}
			e := routeEvent(req, resp, rt)
			if n.who != "" { // the person a sign-in (without a token) was for
				e.Who = n.who
				e.Entities = append(e.Entities, Entity{What: n.who})
			}
			if n.project != "" {
				e.Project = n.project
			}
			if refused {
				e.Outcome, e.Detail = MinorFailure, refusalText(err, resp)
			}
			if rerr := r.Record(ctx, e); rerr != nil {
				log.ErrorContext(ctx, "a request was not answered: the audit trail did not take its event", "route", req.Path, "err", rerr)
				return nil, fhir.Unavailable("The audit trail is unavailable; try again")
			}
			return resp, err
		}
	}
	return eps
}

// outcomeOf reads a handler's result: refused (a 4xx, which a person's
// request earned) or failed (the service's own error: nothing to record).
// A redirect is a page's flow going on, as a success.
func outcomeOf(resp *bus.Response, err error) (refused, failed bool) {
	var fe *fhir.Error
	switch {
	case err != nil:
		refused = errors.As(err, &fe) && fe.Status < 500
		return refused, !refused
	case resp == nil || resp.Status >= 500:
		return false, true
	}
	return resp.Status >= 400, false
}

// routeEvent describes a request: who (when signed in), through which
// client, from where, in which project, on what.
func routeEvent(req *bus.Request, resp *bus.Response, rt Route) Event {
	e := Event{Kind: rt.Kind.Name, Action: rt.Action, Address: req.Remote, Project: req.Param("projectId")}
	if p := req.Principal; p != nil {
		e.Who = p.User
		if e.Project == "" {
			e.Project = p.Project
		}
		e.Client = ClientRef(p.ClientID)
	}
	// What the request made, when it answers with a resource (a project,
	// a membership, a client).
	var made struct {
		ResourceType string `json:"resourceType"`
		ID           string `json:"id"`
	}
	if resp != nil && resp.Status < 300 && len(resp.Body) > 0 && resp.Body[0] == '{' {
		_ = json.Unmarshal(resp.Body, &made)
	}
	what := ""
	switch {
	case rt.Kind == ProjectCreated:
		e.Project, what = made.ID, "Project/"+made.ID
	case req.Param("membershipId") != "":
		what = "ProjectMembership/" + req.Param("membershipId")
	case req.Param("clientId") != "":
		what = "ClientApplication/" + req.Param("clientId")
	case made.ResourceType != "" && made.ID != "":
		what = made.ResourceType + "/" + made.ID
	case e.Project != "":
		what = "Project/" + e.Project
	}
	e.Entities = []Entity{{What: what, Detail: req.Method + " " + req.Path}}
	return e
}

// refusalText is why a request was refused, as its answer says.
func refusalText(err error, resp *bus.Response) string {
	if err != nil {
		return err.Error()
	}
	var oo struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
		Issue       []struct {
			Details struct {
				Text string `json:"text"`
			} `json:"details"`
		} `json:"issue"`
	}
	_ = json.Unmarshal(resp.Body, &oo)
	switch {
	case len(oo.Issue) > 0:
		return oo.Issue[0].Details.Text
	case oo.Error != "":
		return oo.Error + ": " + oo.Description
	}
	return "refused"
}

// note is what a handler tells Wrap of its request that Wrap cannot see:
// who a sign-in by a second factor or a provider turned out to be.
type note struct{ who, project string }

type noteKey struct{}

// Note tells the route's recorder (Recorder.Wrap) that the request
// concerns who (a reference, User/<id>) in project: a sign-in without a
// token, whose person only the handler learns. Outside Wrap it does
// nothing.
func Note(ctx context.Context, who, project string) {
	if n, ok := ctx.Value(noteKey{}).(*note); ok {
		n.who, n.project = who, project
	}
}

// Unserved lists the routes of a table that service does not serve (by
// the generated route table): a route renamed without its table entry
// would silently stop being recorded. Each service's tests call it.
func Unserved(routes map[string]Route, service string) []string {
	var out []string
	for route := range routes {
		if !slices.ContainsFunc(bus.Routes, func(r bus.Route) bool { return r.Method+" "+r.Path == route && r.Service == service }) {
			out = append(out, route)
		}
	}
	return out
}
