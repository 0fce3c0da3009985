package checks

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"sigs.k8s.io/yaml"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/saga"
	"github.com/pinion-health/pinion/pkg/session"
)

// natsOptions parses nats.conf with the passwords compose gives the server.
func natsOptions(t *testing.T) *server.Options {
	t.Helper()
	for k, v := range composeEnv(deployfiles.NATSServers(composeProject(t, nil))[0]) {
		t.Setenv(k, v)
	}
	o, err := deployfiles.NATS(root(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// natsUsers are the configured users by name.
func natsUsers(t *testing.T, o *server.Options) map[string]*server.User {
	t.Helper()
	users := map[string]*server.User{}
	for _, u := range o.Users {
		users[u.Username] = u
	}
	return users
}

func TestNATSServerSettings(t *testing.T) {
	o := natsOptions(t)
	p := composeProject(t, nil)
	if !o.JetStream {
		t.Error("JetStream is off")
	}
	// An acknowledged write is on disk (nats.conf says why).
	if !o.SyncAlways {
		t.Errorf("jetstream sync_interval is %v, want always", o.SyncInterval)
	}
	for _, s := range deployfiles.NATSServers(p) {
		found := false
		for _, v := range s.Volumes {
			found = found || (v.Type == "volume" && v.Target == o.StoreDir)
		}
		if !found {
			t.Errorf("jetstream store_dir %s is not a named volume of %s", o.StoreDir, s.Name)
		}
	}
	// The servers route to each other on 6222 (compose's --routes), and
	// only with the route password.
	if o.Cluster.Name == "" || o.Cluster.Port != 6222 || o.Cluster.Username == "" || o.Cluster.Password == "" {
		t.Errorf("cluster %q on port %d, user %q: want a named cluster on 6222 that requires the route password", o.Cluster.Name, o.Cluster.Port, o.Cluster.Username)
	}
	// The largest request body must fit in one message, with its headers.
	maxBody := varDefault("PINION_MAX_BODY_BYTES")
	if v := composeEnv(p.Services["gateway"])["PINION_MAX_BODY_BYTES"]; v != "" {
		maxBody, _ = strconv.Atoi(v)
	}
	if int(o.MaxPayload) < maxBody+64<<10 {
		t.Errorf("max_payload %d does not hold a %d-byte body and its headers", o.MaxPayload, maxBody)
	}
	if o.MaxPending < 4*int64(o.MaxPayload) {
		t.Errorf("max_pending %d holds fewer than 4 maximal messages", o.MaxPending)
	}
	// Only the five users; no anonymous access.
	if o.NoAuthUser != "" || len(o.Nkeys) > 0 || o.Username != "" || o.Authorization != "" {
		t.Error("a connection without one of the per-process users is possible")
	}
	users := natsUsers(t, o)
	if got := keys(users); !slices.Equal(got, pinionBinaries) {
		t.Errorf("users %v, want %v", got, pinionBinaries)
	}
	for name, u := range users {
		if u.Password != os.Getenv("NATS_"+strings.ToUpper(name)+"_PASSWORD") || u.Password == "" {
			t.Errorf("user %s: password is not read from NATS_%s_PASSWORD", name, strings.ToUpper(name))
		}
		if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
			t.Errorf("user %s: unrestricted", name)
		}
	}
}

// varDefault is the default of a numeric setting.
func varDefault(name string) int {
	for _, v := range config.Vars {
		if v.Name == name {
			n, _ := strconv.Atoi(v.Default)
			return n
		}
	}
	panic("no setting " + name)
}

// permits says whether a permission lets a subject through, as the server
// decides: allowed when some allow entry matches (or there is no allow
// list), unless some deny entry matches.
func permits(p *server.SubjectPermission, subject string) bool {
	if p == nil {
		return true
	}
	ok := len(p.Allow) == 0
	for _, a := range p.Allow {
		ok = ok || server.SubjectMatchesFilter(subject, a)
	}
	for _, d := range p.Deny {
		if server.SubjectMatchesFilter(subject, d) {
			return false
		}
	}
	return ok
}

// TestNATSPermissions holds each user's permissions against the subjects,
// buckets and streams the code uses (constants from pkg/), so a renamed
// subject or bucket breaks here rather than in a deployment.
func TestNATSPermissions(t *testing.T) {
	users := natsUsers(t, natsOptions(t))
	all := pinionBinaries
	kv := func(bucket string) string { return "$KV." + bucket + ".some-key" }
	type permission struct {
		name    string
		pub     bool // publish (else subscribe)
		subject string
		who     []string
	}
	cases := []permission{
		// Service requests: only the gateway, and botexec for bots' calls of
		// the FHIR routes (bus.Routes under /fhir/R4, whichever service
		// serves them).
		{"identity requests", true, bus.SubjectOf("POST", "/oauth2/token"), []string{"gateway"}},
		{"identity requests", true, bus.SubjectOf("GET", "/.well-known/jwks.json"), []string{"gateway"}},
		{"membership requests", true, bus.SubjectOf("POST", "/admin/projects/:projectId/invite"), []string{"gateway"}},
		{"membership requests", true, bus.SubjectOf("DELETE", "/admin/projects/:projectId/members/:membershipId"), []string{"gateway"}},
		{"fhir requests", true, bus.SubjectOf("GET", "/fhir/R4/:type/:id"), []string{"gateway", "botexec"}},
		{"fhir requests", true, bus.SubjectOf("POST", "/fhir/R4/:type"), []string{"gateway", "botexec"}},
		{"fhir requests", true, bus.SubjectOf("POST", "/fhir/R4"), []string{"gateway", "botexec"}},
		{"bot execution", true, bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$execute"), []string{"gateway", "botexec"}},
		{"bot deployment", true, bus.SubjectOf("POST", "/fhir/R4/Bot/:id/$deploy"), []string{"gateway", "botexec"}},
		{"client secret rotation (FHIR route)", true, bus.SubjectOf("POST", "/fhir/R4/ClientApplication/:id/$rotate-secret"), []string{"gateway", "botexec"}},
		{"client secret rotation (admin route)", true, bus.SubjectOf("POST", "/admin/projects/:projectId/client/:clientId/$rotate-secret"), []string{"gateway"}},
		{"project init", true, bus.SubjectOf("POST", "/fhir/R4/Project/$init"), []string{"gateway", "botexec"}},
		{"bulk export", true, bus.SubjectOf("POST", "/fhir/R4/$export"), []string{"gateway", "botexec"}},
		{"client credentials by HTTP Basic", true, bus.SubjBasic, []string{"gateway"}},
		{"bot creation", true, bus.SubjectOf("POST", "/admin/projects/:projectId/bot"), []string{"gateway"}},
		// Each service serves its own subjects only.
		{"serve identity", false, "pinion.identity.>", []string{"identity"}},
		{"serve membership", false, "pinion.membership.>", []string{"membership"}},
		{"serve fhir", false, "pinion.fhir.>", []string{"fhir"}},
		{"serve botexec", false, "pinion.botexec.>", []string{"botexec"}},
		{"micro services", false, "$SRV.PING.fhir", []string{"identity", "membership", "fhir", "botexec"}},
		// Resource events follow writes, which only services make.
		{"publish events", true, bus.EventSubject("Patient", "create"), []string{"identity", "membership", "fhir", "botexec"}},
		{"cache invalidation", false, bus.EventPrefix + ">", []string{"identity", "membership", "fhir", "botexec"}},
		{"mail queue", true, mail.Subject, []string{"identity"}},
		// The audit trail: services record, fhir's writers store.
		{"audit events", true, audit.SubjectPrefix + "p1", []string{"identity", "membership", "fhir"}},
		{"audit writer acks", true, "$JS.ACK." + audit.Stream + ".audit-writer.1.2.3.4.5", []string{"fhir"}},
		{"invite end", true, invite.DoneSubject("x"), []string{"identity", "membership", "fhir"}},
		{"invite wait", false, invite.DoneSubject("x"), []string{"membership"}},
		{"saga acks", true, "$JS.ACK." + saga.Stream + ".identity-invite-user.1.2.3.4.5", []string{"identity", "membership", "fhir"}},
		// The session projector: every service runs one, asks it, and
		// acknowledges the resource events it follows; the gateway does none.
		{"ask a projection", true, bus.SubjSessionProject, []string{"identity", "membership", "fhir", "botexec"}},
		{"project sessions", false, bus.SubjSessionProject, []string{"identity", "membership", "fhir", "botexec"}},
		{"projector acks", true, "$JS.ACK." + infra.ResourceStream + ".session-projector.1.2.3.4.5", []string{"identity", "membership", "fhir", "botexec"}},
		// Subscriptions: only botexec matches changes and delivers them.
		{"subscription matcher acks", true, "$JS.ACK." + infra.ResourceStream + ".subscription-matcher.1.2.3.4.5", []string{"identity", "membership", "fhir", "botexec"}},
		{"deliveries", true, "pinion.deliveries.pending.p1.s1", []string{"botexec"}},
		{"dead letters", true, "pinion.deliveries.dead.p1.s1", []string{"botexec"}},
		{"websocket notifications", true, bus.WSSubject("s1"), []string{"botexec"}},
		{"websocket bindings", false, bus.WSSubject("s1"), []string{"gateway"}},
		{"delivery acks", true, "$JS.ACK.PINION_DELIVERIES.subscription-delivery.1.2.3.4.5", []string{"botexec"}},
		// Key-value buckets: who may write which.
		{"logins", true, kv(session.LoginsBucket), []string{"identity"}},
		{"revoked tokens", true, kv(session.RevokedBucket), []string{"identity"}},
		{"memberships", true, kv(session.MembershipsBucket), []string{"identity", "membership", "fhir", "botexec"}},
		{"ended sign-ins", true, kv(session.EndedBucket), []string{"identity"}},
		{"users' recent sign-ins", true, kv(session.UserLoginsBucket), []string{"identity"}},
		// services/identity's own buckets (authorize.go, consent.go).
		{"signed-in browsers", true, kv("pinion_browser_sessions"), []string{"identity"}},
		{"consents", true, kv("pinion_consents"), []string{"identity"}},
		// services/botexec's schedule of bots (cron.go).
		{"scheduled bots", true, kv("pinion_bot_cron"), []string{"botexec"}},
		{"watch ended sign-ins", true, "$JS.API.CONSUMER.CREATE.KV_" + session.EndedBucket + ".x.>", all},
		{"invite records", true, kv(invite.Bucket), []string{"identity", "membership", "fhir"}},
		// The gateway may read the session buckets but not change them.
		{"watch sessions", true, "$JS.API.CONSUMER.CREATE.KV_" + session.MembershipsBucket + ".x.>", all},
		{"read sessions", true, "$JS.API.DIRECT.GET.KV_" + session.LoginsBucket + ".$KV." + session.LoginsBucket + ".x", all},
		{"start-up stream", true, "$JS.API.STREAM.UPDATE." + infra.ResourceStream, all},
		{"purge sessions", true, "$JS.API.STREAM.PURGE.KV_" + session.MembershipsBucket, []string{"identity", "membership", "fhir", "botexec"}},
		{"delete saga stream", true, "$JS.API.STREAM.DELETE." + saga.Stream, []string{"identity", "membership", "fhir", "botexec"}},
		{"take saga steps", true, "$JS.API.CONSUMER.CREATE." + saga.Stream + ".x", []string{"identity", "membership", "fhir", "botexec"}},
		// Replies: to requests received only (allow_responses), never at will.
		{"replies", true, "_INBOX.abc.def", nil},
		{"own replies", false, "_INBOX.>", all},
	}
	// Invite saga steps (invite.Saga): each from the service of the step
	// before it, the first from the service that starts the invite.
	for i, st := range invite.Saga {
		from := invite.Starter
		if i > 0 {
			from = invite.Saga[i-1].Service
		}
		cases = append(cases, permission{st.Name + " step", true, st.Subject, []string{from}})
	}
	for _, tc := range cases {
		for _, user := range all {
			u := users[user]
			if u == nil {
				t.Fatalf("no user %s", user)
			}
			perm, verb := u.Permissions.Subscribe, "subscribe to"
			if tc.pub {
				perm, verb = u.Permissions.Publish, "publish"
			}
			if got, want := permits(perm, tc.subject), slices.Contains(tc.who, user); got != want {
				t.Errorf("%s: %s may %s %s: %v, want %v", tc.name, user, verb, tc.subject, got, want)
			}
		}
	}
	for _, user := range all {
		resp := users[user].Permissions.Response
		if (resp != nil) != (user != "gateway") {
			t.Errorf("%s: allow_responses %v; services answer requests, the gateway answers none", user, resp != nil)
		}
	}
}

// TestBotsReachEveryFHIRRoute: a bot's medplum client may call every route
// under /fhir/R4 (bus.FHIRRoute resolves them all), so the bot executor's
// NATS user must be allowed to send each of their requests; and the
// gateway, every route's.
func TestBotsReachEveryFHIRRoute(t *testing.T) {
	users := natsUsers(t, natsOptions(t))
	for _, r := range bus.Routes {
		if strings.HasPrefix(r.Path, "/fhir/R4") && !permits(users["botexec"].Permissions.Publish, r.Subject) {
			t.Errorf("a bot cannot call %s %s: botexec may not publish %s", r.Method, r.Path, r.Subject)
		}
		if !permits(users["gateway"].Permissions.Publish, r.Subject) {
			t.Errorf("the gateway may not publish %s (%s %s)", r.Subject, r.Method, r.Path)
		}
	}
}

// The Helm values for Kubernetes run NATS as compose does: same image, same
// JetStream durability, the same pinion-nats.conf with its password
// variables taken from a Secret.
func TestNATSHelmValues(t *testing.T) {
	r := root(t)
	b, err := os.ReadFile(filepath.Join(r, deployfiles.NATSValues))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Container struct {
			Image struct{ Repository, Tag string }
			Env   map[string]struct {
				ValueFrom struct {
					SecretKeyRef struct{ Name, Key string } `json:"secretKeyRef"`
				} `json:"valueFrom"`
			}
		}
		Config struct {
			Cluster struct {
				Enabled  bool
				Replicas int
			}
			JetStream struct {
				Enabled   bool
				FileStore struct {
					PVC struct{ Size string }
				} `json:"fileStore"`
				Merge map[string]any
			} `json:"jetstream"`
			Merge map[string]any
		}
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", deployfiles.NATSValues, err)
	}
	composeImage := deployfiles.NATSServers(composeProject(t, nil))[0].Image
	if got := v.Container.Image.Repository + ":" + v.Container.Image.Tag; got != composeImage {
		t.Errorf("image %s; compose runs %s", got, composeImage)
	}
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas < 3 {
		t.Error("want a cluster of at least 3 servers")
	}
	if !v.Config.JetStream.Enabled || v.Config.JetStream.FileStore.PVC.Size == "" {
		t.Error("want JetStream on a persistent volume")
	}
	if v.Config.JetStream.Merge["sync_interval"] != "always" {
		t.Errorf("jetstream sync_interval %v, want always (as nats.conf)", v.Config.JetStream.Merge["sync_interval"])
	}
	if v.Config.Merge["$include"] != filepath.Base(deployfiles.PinionNATSConf) {
		t.Errorf("config.merge does not include %s", filepath.Base(deployfiles.PinionNATSConf))
	}
	vars, err := deployfiles.PasswordVars(r, deployfiles.PinionNATSConf)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for k, e := range v.Container.Env {
		env = append(env, k)
		if e.ValueFrom.SecretKeyRef.Name == "" {
			t.Errorf("%s is not taken from a Secret", k)
		}
	}
	sort.Strings(vars)
	sort.Strings(env)
	if !slices.Equal(vars, env) {
		t.Errorf("the container gets %v; pinion-nats.conf reads %v", env, vars)
	}
}
