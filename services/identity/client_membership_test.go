package identity

import (
	"context"
	"net/url"
	"strconv"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// A client deactivated a moment ago is refused by a token request that
// names the revision of the deactivation, as the gateway names it.
func TestClientTokenAfterDeactivation(t *testing.T) {
	project := newProject(t, "Deactivated at once")
	id, secret := newClient(t, project, nil)
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	call := func(rev uint64) *bus.Response {
		r := formRequest(form, map[string]string{session.AppliedHeader: strconv.FormatUint(rev, 10)})
		resp, err := live.svc.oauth.Token(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	membership := cachedClient(t, id).Membership
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
	testkit.TokenError(t, call(rev), 400, "unauthorized_client", "Profile not active")
}
