package checks

import (
	"context"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
	"github.com/pinion-health/pinion/pkg/config"
)

// pinionBinaries are the processes a multi-process deployment runs; each is
// a compose service, a Dockerfile target and a Kubernetes Deployment.
var pinionBinaries = []string{"botexec", "fhir", "gateway", "identity", "membership"}

// root is the repository root, found once.
func root(t *testing.T) string {
	t.Helper()
	r, err := deployfiles.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// composeProject loads docker-compose.yml with the given variables.
func composeProject(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	p, err := deployfiles.Compose(context.Background(), root(t), env)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// knownVar says whether the code reads a PINION_ variable.
func knownVar(name string) bool {
	for _, v := range config.Vars {
		if v.Name == name {
			return true
		}
	}
	return false
}

// composeEnv is the environment docker compose hands a service's container.
func composeEnv(s types.ServiceConfig) map[string]string { return deployfiles.Env(s) }

func TestComposePinionServices(t *testing.T) {
	// No variables at all: `docker compose up` must work out of the box.
	p := composeProject(t, nil)
	pinion := deployfiles.PinionServices(p)
	var names []string
	for name := range pinion {
		names = append(names, name)
	}
	sort.Strings(names)
	if !slices.Equal(names, pinionBinaries) {
		t.Fatalf("services built from %s: %v, want %v", deployfiles.Dockerfile, names, pinionBinaries)
	}
	servers := deployfiles.NATSServers(p)
	if len(servers) < 3 {
		t.Fatalf("%d NATS servers (nats-1, nats-2, ...): want a cluster of at least 3, so that one can be lost", len(servers))
	}
	natsEnv := composeEnv(servers[0])
	for _, name := range names {
		s := pinion[name]
		t.Run(name, func(t *testing.T) {
			env := composeEnv(s)
			for k := range env {
				if !knownVar(k) {
					t.Errorf("environment %s: not a setting the code reads (pkg/config.Vars)", k)
				}
			}
			// The settings must be valid as the process will read them.
			cfg, err := config.LoadFrom(func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("config.Load would fail: %v", err)
			}
			// What the mains demand (gateway/cmd/gateway, pkg/infra.RunService).
			if cfg.NATSURL == "" {
				t.Error("PINION_NATS_URL is required")
			}
			if name != "gateway" && cfg.MongoURI == "" {
				t.Error("PINION_MONGODB_URI is required")
			}
			if name == "identity" && (cfg.SuperAdminClientID == "" || cfg.SuperAdminSecret == "") {
				t.Error("identity needs PINION_SUPERADMIN_CLIENT_ID and _SECRET: a separate process cannot show generated ones")
			}
			// Each process is its own NATS user, with the password the
			// NATS servers are given for that user, and knows every server.
			urls, err := deployfiles.NATSURLs(cfg.NATSURL)
			if err != nil {
				t.Fatalf("PINION_NATS_URL %q: %v", cfg.NATSURL, err)
			}
			hosts := map[string]bool{}
			for _, u := range urls {
				if u.User == nil || u.User.Username() != name {
					t.Errorf("PINION_NATS_URL %s: want user %q", u.Redacted(), name)
					continue
				}
				pw, _ := u.User.Password()
				if want := natsEnv["NATS_"+strings.ToUpper(name)+"_PASSWORD"]; pw == "" || pw != want {
					t.Errorf("PINION_NATS_URL password differs from the NATS servers' NATS_%s_PASSWORD", strings.ToUpper(name))
				}
				if h, port, _ := net.SplitHostPort(u.Host); !strings.HasPrefix(h, "nats-") || p.Services[h].Name != h || port != "4222" {
					t.Errorf("PINION_NATS_URL host %q is not a NATS server on 4222", u.Host)
				} else {
					hosts[h] = true
				}
			}
			if len(hosts) != len(servers) {
				t.Errorf("PINION_NATS_URL names %d of the %d NATS servers: a process must reach the others when one is lost", len(hosts), len(servers))
			}
			// Every stream and bucket on every server.
			if cfg.NATSReplicas != len(servers) {
				t.Errorf("PINION_NATS_REPLICAS %d: want %d, the NATS servers compose runs", cfg.NATSReplicas, len(servers))
			}
			if cfg.MongoURI != "" {
				m, err := url.Parse(cfg.MongoURI)
				if err != nil {
					t.Fatal(err)
				}
				if h, _, _ := net.SplitHostPort(m.Host); h != "mongo" {
					t.Errorf("PINION_MONGODB_URI host %q, want the mongo service", m.Host)
				}
				// w: majority needs the replica set the mongo service runs.
				if rs := m.Query().Get("replicaSet"); rs == "" || !slices.Contains(p.Services["mongo"].Command, rs) {
					t.Errorf("PINION_MONGODB_URI replicaSet %q is not mongo's --replSet", rs)
				}
			}
			// Hardening.
			if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
				t.Error("want read_only, cap_drop ALL and no-new-privileges")
			}
			if s.PullPolicy != types.PullPolicyBuild {
				t.Errorf("pull_policy %q: want build, so compose never pulls a same-named image", s.PullPolicy)
			}
		})
	}
}

// Secrets come from variables, so a .env file can replace every default.
func TestComposeSecretsAreVariables(t *testing.T) {
	env := map[string]string{
		"PINION_SUPERADMIN_CLIENT_ID":     "ops-admin",
		"PINION_SUPERADMIN_CLIENT_SECRET": strings.Repeat("z", 40),
	}
	for _, name := range pinionBinaries {
		env["NATS_"+strings.ToUpper(name)+"_PASSWORD"] = "pw-" + name
	}
	env["NATS_ROUTE_PASSWORD"] = "pw-routes"
	p := composeProject(t, env)
	servers := deployfiles.NATSServers(p)
	natsEnv := composeEnv(servers[0])
	for _, s := range servers {
		if !maps.Equal(composeEnv(s), natsEnv) {
			t.Errorf("%s: environment differs from %s's", s.Name, servers[0].Name)
		}
		if s.Environment["NATS_ROUTE_PASSWORD"] == nil || *s.Environment["NATS_ROUTE_PASSWORD"] != "pw-routes" {
			t.Errorf("%s: NATS_ROUTE_PASSWORD is not taken from the variable", s.Name)
		}
		// Its routes: every server's cluster port, with the route password.
		i := slices.Index(s.Command, "--routes")
		if i < 0 || i+1 >= len(s.Command) {
			t.Errorf("%s: no --routes", s.Name)
			continue
		}
		routes, _ := deployfiles.NATSURLs(s.Command[i+1])
		var hosts []string
		for _, r := range routes {
			if pw, _ := r.User.Password(); r.Scheme != "nats-route" || r.User.Username() != "route" || pw != "pw-routes" {
				t.Errorf("%s: route %s does not use the route user and NATS_ROUTE_PASSWORD", s.Name, r.Redacted())
			}
			hosts = append(hosts, r.Host)
		}
		var want []string
		for _, o := range servers {
			want = append(want, o.Name+":6222")
		}
		if !slices.Equal(hosts, want) {
			t.Errorf("%s: routes to %v, want %v", s.Name, hosts, want)
		}
	}
	for _, name := range pinionBinaries {
		v := "NATS_" + strings.ToUpper(name) + "_PASSWORD"
		if natsEnv[v] != env[v] {
			t.Errorf("nats: %s is not taken from the variable", v)
		}
		urls, _ := deployfiles.NATSURLs(composeEnv(p.Services[name])["PINION_NATS_URL"])
		for _, u := range urls {
			if pw, _ := u.User.Password(); pw != env[v] {
				t.Errorf("%s: PINION_NATS_URL password is not taken from %s", name, v)
			}
		}
	}
	id := composeEnv(p.Services["identity"])
	if id["PINION_SUPERADMIN_CLIENT_ID"] != "ops-admin" || id["PINION_SUPERADMIN_CLIENT_SECRET"] != env["PINION_SUPERADMIN_CLIENT_SECRET"] {
		t.Error("identity: super-admin credentials are not taken from the variables")
	}
	// The NATS server reads exactly the password variables compose gives it.
	vars, err := deployfiles.PasswordVars(root(t), deployfiles.NATSConf, deployfiles.PinionNATSConf)
	if err != nil {
		t.Fatal(err)
	}
	var given []string
	for k := range natsEnv {
		given = append(given, k)
	}
	sort.Strings(vars)
	sort.Strings(given)
	if !slices.Equal(vars, given) {
		t.Errorf("pinion-nats.conf reads %v; compose gives nats %v", vars, given)
	}
}

func TestComposeBuildsAndImages(t *testing.T) {
	p := composeProject(t, nil)
	stages := dockerStages(t)
	for name, s := range p.Services {
		t.Run(name, func(t *testing.T) {
			if s.Build != nil {
				ctxDir := s.Build.Context
				if fi, err := os.Stat(ctxDir); err != nil || !fi.IsDir() {
					t.Fatalf("build context %s: not a directory", ctxDir)
				}
				if _, err := os.Stat(filepath.Join(ctxDir, s.Build.Dockerfile)); err != nil {
					t.Fatalf("dockerfile: %v", err)
				}
				if _, ok := stages[s.Build.Target]; !ok {
					t.Errorf("build target %q is not a stage of %s", s.Build.Target, deployfiles.Dockerfile)
				}
				if s.Build.Target != name {
					t.Errorf("build target %q: want the service's own binary %q", s.Build.Target, name)
				}
				if s.Build.Args["VERSION"] == nil {
					t.Error("build arg VERSION is not passed")
				}
				// Named as make images names it, so either may build it.
				if repo, _, _ := strings.Cut(s.Image, ":"); repo != makeVar(t, "IMAGE_PREFIX")+name {
					t.Errorf("image %s: want %s%s (make images)", s.Image, makeVar(t, "IMAGE_PREFIX"), name)
				}
				return
			}
			if err := pinned(s.Image); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestComposePortsAndNetworks(t *testing.T) {
	p := composeProject(t, nil)
	for name, s := range p.Services {
		if name != "gateway" && len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only the gateway may publish a port", name, s.Ports)
		}
	}
	gw := p.Services["gateway"]
	addr := composeEnv(gw)["PINION_ADDR"]
	_, port, _ := net.SplitHostPort(addr)
	if len(gw.Ports) != 1 || gw.Ports[0].Published != "8103" || port != "8103" || gw.Ports[0].Target != 8103 {
		t.Errorf("gateway: ports %+v with PINION_ADDR %q, want 8103 published to PINION_ADDR's port 8103 (as make run)", gw.Ports, addr)
	}
	if len(gw.Ports) == 1 && gw.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("gateway: published on %q by default, want 127.0.0.1 (the defaults are development passwords)", gw.Ports[0].HostIP)
	}
	if !p.Networks["backend"].Internal {
		t.Error("network backend must be internal: MongoDB, NATS and the services need no outside route")
	}
	for name, s := range p.Services {
		if _, ok := s.Networks["backend"]; !ok || (len(s.Networks) > 1 && name != "gateway" && name != "membership") {
			t.Errorf("%s: networks %v, want backend (and edge only for the gateway and membership's SMTP)", name, keys(s.Networks))
		}
	}
}

func TestComposeHealthAndOrder(t *testing.T) {
	p := composeProject(t, nil)
	pinion := deployfiles.PinionServices(p)
	for name, s := range p.Services {
		t.Run(name, func(t *testing.T) {
			oneShot := s.Restart == types.RestartPolicyNo
			hc := s.HealthCheck
			switch {
			case oneShot && hc != nil:
				t.Error("a one-shot service needs no health check")
			case !oneShot && (hc == nil || hc.Disable || len(hc.Test) < 2):
				t.Fatal("no health check")
			}
			if _, ok := pinion[name]; ok {
				// The gateway is healthy when ready to serve; a service when
				// its admin port answers, which it opens once connected.
				env := composeEnv(s)
				addr, path := env["PINION_ADMIN_ADDR"], "/livez"
				if name == "gateway" {
					addr, path = env["PINION_ADDR"], "/readyz"
				}
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					t.Fatalf("no port to probe: %v", err)
				}
				want := []string{"CMD", "/usr/local/bin/pinion-probe", "http://127.0.0.1:" + port + path}
				if !slices.Equal(hc.Test, want) {
					t.Errorf("health check %v, want %v (the images have no shell)", hc.Test, want)
				}
			}
			for dep, d := range s.DependsOn {
				target, ok := p.Services[dep]
				if !ok {
					t.Fatalf("depends on unknown %s", dep)
				}
				want := types.ServiceConditionHealthy
				if target.Restart == types.RestartPolicyNo {
					want = types.ServiceConditionCompletedSuccessfully
				}
				if d.Condition != want {
					t.Errorf("depends_on %s: condition %q, want %q", dep, d.Condition, want)
				}
			}
		})
	}
	// Every Pinion process waits for NATS; every service for the replica set.
	for name, s := range pinion {
		for _, n := range deployfiles.NATSServers(p) {
			if s.DependsOn[n.Name].Condition == "" {
				t.Errorf("%s does not wait for %s", name, n.Name)
			}
		}
		if name != "gateway" && s.DependsOn["mongo-init"].Condition == "" {
			t.Errorf("%s does not wait for the replica set (mongo-init)", name)
		}
	}
	if init := p.Services["mongo-init"]; init.DependsOn["mongo"].Condition == "" {
		t.Error("mongo-init does not wait for mongo")
	}
}

func TestComposeVolumes(t *testing.T) {
	p := composeProject(t, nil)
	r := root(t)
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeVolume:
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %s is not a declared named volume", name, v.Source)
				}
			case types.VolumeTypeBind:
				// Only configuration files from this repository, read-only
				// (pinion-nats.conf lives beside the code that embeds it).
				rel, err := filepath.Rel(r, v.Source)
				if err != nil || !(strings.HasPrefix(rel, "deploy/docker/") || rel == deployfiles.PinionNATSConf) || !v.ReadOnly {
					t.Errorf("%s: bind mount %s: want a read-only file under deploy/docker", name, v.Source)
				}
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			default:
				t.Errorf("%s: volume type %s", name, v.Type)
			}
		}
	}
	// Stateful services keep their data in named volumes, each its own.
	stateful := map[string]string{"mongo": "/data/db", "membership": "/data"}
	for _, n := range deployfiles.NATSServers(p) {
		stateful[n.Name] = "/data"
	}
	owner := map[string]string{}
	for name, dir := range stateful {
		found := false
		for _, v := range p.Services[name].Volumes {
			if v.Type == types.VolumeTypeVolume && v.Target == dir {
				found = true
				if other, ok := owner[v.Source]; ok {
					t.Errorf("%s and %s share the volume %s", name, other, v.Source)
				}
				owner[v.Source] = name
			}
		}
		if !found {
			t.Errorf("%s: no named volume at %s", name, dir)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
