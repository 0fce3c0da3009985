// Package deployfiles finds and loads Pinion's deployment files for the
// checks: the compose file, the Dockerfile and the NATS configuration.
package deployfiles

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"
)

// Root is the repository root: the nearest directory above the working
// directory that holds go.work.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}

// Paths of the deployment files, relative to the root.
const (
	ComposeFile    = "docker-compose.yml"
	Dockerfile     = "deploy/docker/Dockerfile"
	NATSConf       = "deploy/docker/nats.conf"
	PinionNATSConf = "pkg/embedded/pinion-nats.conf"
	K8sDir         = "deploy/k8s"
	NATSValues     = "deploy/k8s/nats/values.yaml"
)

// Compose loads and validates docker-compose.yml as docker compose would,
// interpolating variables from env only (not from this process's
// environment, so the result does not depend on the machine).
func Compose(ctx context.Context, root string, env map[string]string) (*types.Project, error) {
	if env == nil {
		env = map[string]string{}
	}
	return loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, ComposeFile)}},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("pinion", true) })
}

// Env is a compose service's environment as plain strings (a variable
// listed without a value is empty).
func Env(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		} else {
			env[k] = ""
		}
	}
	return env
}

// PinionServices are the compose services that run a Pinion binary: those
// built from the Dockerfile, by target (the binary's name).
func PinionServices(p *types.Project) map[string]types.ServiceConfig {
	out := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		if s.Build != nil && filepath.ToSlash(s.Build.Dockerfile) == Dockerfile {
			out[name] = s
		}
	}
	return out
}

// NATS parses nats.conf (and what it includes) with the NATS server's own
// parser. The configuration reads passwords from the environment, so the
// caller sets them first (t.Setenv). Parse errors and warnings both fail.
func NATS(root string) (*server.Options, error) {
	// The server reads both files from one directory, as compose mounts
	// them (nats.conf includes ./pinion-nats.conf).
	dir, err := os.MkdirTemp("", "pinion-nats-conf-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, f := range []string{NATSConf, PinionNATSConf} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			return nil, err
		}
	}
	o := &server.Options{}
	if err := o.ProcessConfigFile(filepath.Join(dir, filepath.Base(NATSConf))); err != nil {
		return nil, fmt.Errorf("%s: %w", NATSConf, err)
	}
	return o, nil
}

// PasswordVars lists the environment variables NATS configuration files
// (NATSConf, PinionNATSConf) read passwords from, in the order they
// appear: the users' in pinion-nats.conf, the routes' in nats.conf.
func PasswordVars(root string, files ...string) ([]string, error) {
	var vars []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") {
				continue
			}
			_, after, ok := strings.Cut(line, "password: $")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(after, ",")
			vars = append(vars, strings.TrimSpace(name))
		}
	}
	return vars, nil
}

// NATSServers are the compose services that run a NATS server (nats-1,
// nats-2, ...), by name, in order.
func NATSServers(p *types.Project) []types.ServiceConfig {
	var out []types.ServiceConfig
	for i := 1; ; i++ {
		s, ok := p.Services[fmt.Sprintf("nats-%d", i)]
		if !ok {
			return out
		}
		out = append(out, s)
	}
}

// NATSURLs splits a PINION_NATS_URL (a comma-separated list, one URL per
// server) into its URLs.
func NATSURLs(v string) ([]*url.URL, error) {
	var out []*url.URL
	for _, part := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}
