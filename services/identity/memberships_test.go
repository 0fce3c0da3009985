package identity

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// A client's membership entry is kept between tokens, and is as fresh as
// the revision the gateway names: every write the gateway had applied is
// seen, however soon the request follows it.
func TestClientMembershipsFollowTheGateway(t *testing.T) {
	ctx := context.Background()
	cm, sessions := live.svc.members, live.conns.Sessions
	id := uuid.NewString()
	rev, err := sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cm.get(ctx, id, rev); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
	if e, ok := cm.entries.Peek(id); !ok || !e.ready || e.m == nil || !e.m.Active {
		t.Fatalf("the entry is not kept: %+v %v", e, ok)
	}

	// Each write is followed at once by a request naming it.
	if rev, err = sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Active: false}); err != nil {
		t.Fatal(err)
	}
	if m, err := cm.get(ctx, id, rev); err != nil || m.Active {
		t.Fatalf("%+v %v, want inactive", m, err)
	}
	if rev, err = sessions.DeleteMembership(ctx, id); err != nil {
		t.Fatal(err)
	}
	if m, err := cm.get(ctx, id, rev); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("%+v %v, want no entry", m, err)
	}
	if e, ok := cm.entries.Peek(id); !ok || !e.ready || e.m != nil {
		t.Fatalf("the absence is not kept: %+v %v", e, ok)
	}

	// Without a revision the bucket is read, the copy not waited for.
	if _, err := sessions.PutMembership(ctx, id, session.Membership{Project: "p1", Active: true}); err != nil {
		t.Fatal(err)
	}
	if m, err := cm.get(ctx, id, 0); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
	// A revision the copy never reaches is read from the bucket too.
	if m, err := cm.get(ctx, id, 1<<62); err != nil || !m.Active {
		t.Fatalf("%+v %v, want active", m, err)
	}
}

// A client deactivated a moment ago is refused by a token request that
// names the revision of the deactivation, as the gateway names it.
func TestClientTokenAfterDeactivation(t *testing.T) {
	project := newProject(t, "Deactivated at once")
	id, secret := newClient(t, project, nil)
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	call := func(rev uint64) *bus.Response {
		r := formRequest(form, map[string]string{session.AppliedHeader: strconv.FormatUint(rev, 10)})
		resp, err := live.svc.token(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	membership := cachedClient(t, id).membership
	for i := 0; i < 2; i++ { // the second answer comes from the kept entry
		if resp := call(1); resp.Status != 200 {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
	}
	res, err := live.conns.Repo.Read(context.Background(), repo.AllProjects, "ProjectMembership", membership)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := res.Decode()
	if err != nil {
		t.Fatal(err)
	}
	doc["active"] = false
	if _, err := live.conns.Repo.Update(context.Background(), repo.AllProjects, doc, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rev, err := projects.Project(context.Background(), live.conns.NC, "ProjectMembership", membership, project)
	if err != nil {
		t.Fatal(err)
	}
	expectTokenError(t, call(rev), 400, "unauthorized_client", "Profile not active")
}
