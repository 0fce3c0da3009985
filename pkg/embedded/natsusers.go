package embedded

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/pinion-health/pinion/pkg/auth"
)

// natsConf is the NATS configuration every deployment of Pinion uses: its
// users, one per process, with only the permissions that process needs.
//
//go:embed pinion-nats.conf
var natsConf string

// NATSUserNames are the processes with a NATS user of their own.
var NATSUserNames = []string{"botexec", "fhir", "gateway", "identity", "membership"}

// NATSUsers are pinion-nats.conf's users with the given passwords: only
// the gateway (and the bot executor, for bots) may send service requests,
// which carry the caller as a header, so services can trust that header.
func NATSUsers(passwords map[string]string) ([]*server.User, error) {
	conf := natsConf
	for _, name := range NATSUserNames {
		pw := passwords[name]
		if pw == "" || strings.ContainsAny(pw, "\\\"\n") {
			return nil, fmt.Errorf("nats users: no usable password for %s", name)
		}
		conf = strings.ReplaceAll(conf, "$NATS_"+strings.ToUpper(name)+"_PASSWORD", `"`+pw+`"`)
	}
	o := &server.Options{}
	if err := o.ProcessConfigString(conf); err != nil {
		return nil, fmt.Errorf("nats users: %w", err)
	}
	sort.Slice(o.Users, func(i, j int) bool { return o.Users[i].Username < o.Users[j].Username })
	return o.Users, nil
}

// NATSPasswordsFile holds the embedded server's passwords in the data
// directory, readable only by its owner.
const NATSPasswordsFile = "nats-users.json"

// RoutePasswordKey names, in the passwords file, the password the servers
// of an embedded cluster present to each other (not a client's user).
const RoutePasswordKey = "routes"

// NATSPasswords reads the passwords of a data directory's NATS users,
// creating them (256 random bits each) on first use, so that separately
// run processes find theirs after a restart. A file from before routes had
// a password gets one added.
func NATSPasswords(dataDir string) (map[string]string, error) {
	path := filepath.Join(dataDir, NATSPasswordsFile)
	pw := map[string]string{}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &pw); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if pw[RoutePasswordKey] != "" {
			return pw, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	for _, name := range append(NATSUserNames, RoutePasswordKey) {
		if pw[name] == "" {
			pw[name] = auth.NewSecret()
		}
	}
	b, _ = json.MarshalIndent(pw, "", "  ")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return pw, nil
}
