package gateway

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/session"
)

// samplePaths are paths each route's pattern answers: its :names filled
// with a plain value, then, one :name at a time, with every literal some
// route has at that segment (Bot, metadata, $export, ...), so that where
// two patterns overlap the first to match must be the same one for both
// routers.
func samplePaths(r bus.Route) []string {
	literals := map[int][]string{}
	seen := map[string]bool{}
	for _, o := range bus.Routes {
		for i, seg := range strings.Split(strings.Trim(o.Path, "/"), "/") {
			if k := strconv.Itoa(i) + seg; !strings.HasPrefix(seg, ":") && !seen[k] {
				seen[k] = true
				literals[i] = append(literals[i], seg)
			}
		}
	}
	segs := strings.Split(strings.Trim(r.Path, "/"), "/")
	plain := make([]string, len(segs))
	for i, seg := range segs {
		plain[i] = seg
		if strings.HasPrefix(seg, ":") {
			plain[i] = "v" + seg[1:]
		}
	}
	paths := []string{"/" + strings.Join(plain, "/")}
	for i, seg := range segs {
		if !strings.HasPrefix(seg, ":") {
			continue
		}
		for _, lit := range literals[i] {
			p := append([]string(nil), plain...)
			p[i] = lit
			paths = append(paths, "/"+strings.Join(p, "/"))
		}
	}
	return paths
}

// TestGatewayRoutesAsMatch: the gateway's router (Fiber's, over
// bus.Routes) and bus.Match, which a bot's calls and a batch's entries go
// through, answer every sample path of every route with the same route
// and the same parameters; and the gateway names the applied memberships
// revision on exactly the routes with the NamesApplied trait. Each route's
// subject is answered here by an echo of what the gateway forwarded.
func TestGatewayRoutesAsMatch(t *testing.T) {
	s := startBearerStack(t)
	svc, err := micro.AddService(s.nc, micro.Config{Name: "echo", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	// The stack's JWKS responder already answers this route's subject.
	jwks := bus.SubjectOf("GET", "/.well-known/jwks.json")
	for i, r := range bus.Routes {
		if r.Subject == jwks {
			continue
		}
		subject := r.Subject
		err := svc.AddEndpoint("r"+strconv.Itoa(i), micro.HandlerFunc(func(m micro.Request) {
			req, _ := bus.DecodeRequest(natsHeader(m), m.Data())
			b, _ := json.Marshal(map[string]any{"subject": subject, "params": req.Params, "applied": req.Get(session.AppliedHeader) != ""})
			_ = m.Respond(b, micro.WithHeaders(micro.Headers(bus.EncodeResponse(&bus.Response{Status: 200}))))
		}), micro.WithEndpointSubject(subject))
		if err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := s.access(t, s.login(t, "u-routes"), time.Hour)
	h := map[string]string{"Authorization": "Bearer " + tok}

	checked := 0
	for _, r := range bus.Routes {
		for _, path := range samplePaths(r) {
			checked++
			want, params, ok := bus.Match(r.Method, path)
			if !ok {
				t.Errorf("%s %s: bus.Match finds no route", r.Method, path)
				continue
			}
			st, got, _ := send(t, r.Method, s.url+strings.TrimPrefix(path, "/"), nil, h)
			if want.Subject == jwks {
				if _, keys := got["keys"]; st != 200 || !keys {
					t.Errorf("%s %s: %d %v, want the JWKS", r.Method, path, st, got)
				}
				continue
			}
			gotParams := map[string]string{}
			if ps, _ := got["params"].(map[string]any); ps != nil {
				for k, v := range ps {
					gotParams[k], _ = v.(string)
				}
			}
			if st != 200 || got["subject"] != want.Subject || !maps.Equal(gotParams, params) {
				t.Errorf("%s %s: the gateway answers %d from %v with %v; bus.Match: %s with %v", r.Method, path, st, got["subject"], gotParams, want.Subject, params)
				continue
			}
			if got["applied"] != want.Has(bus.NamesApplied) {
				t.Errorf("%s %s: applied revision named %v, NamesApplied %v", r.Method, path, got["applied"], want.Has(bus.NamesApplied))
			}
		}
	}
	t.Logf("%d paths routed alike", checked)
}
