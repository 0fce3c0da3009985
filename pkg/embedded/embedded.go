// Package embedded starts the servers Pinion needs inside the current
// process: a NATS server with JetStream and FerretDB, which speaks the
// MongoDB wire protocol. The standalone process and the integration tests
// use it, so both run against real servers over real sockets.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/nats-io/nats-server/v2/server"
)

// NATSOptions configures the embedded NATS server.
type NATSOptions struct {
	// Dir is where JetStream keeps its files.
	Dir string
	// Addr is host:port to listen on; port 0 picks a free one.
	Addr string
	// MaxPayload bounds one message; it must hold the largest request body.
	MaxPayload int32
	// SyncInterval is how often JetStream fsyncs; "always" syncs every write.
	SyncInterval time.Duration
	SyncAlways   bool
	// NoListen serves only in-process connections: nothing else on the
	// machine can reach the bus.
	NoListen bool
	// Users, when set, are the only connections the server accepts (a
	// server that listens must have them: see NATSUsers).
	Users []*server.User
	// ClusterAddr, when set, is where this server takes routes from the
	// other servers of its cluster (Routes), which authenticate with
	// RoutePassword. The server's name follows from it, so it must stay
	// the same across restarts: JetStream knows its peers by name.
	ClusterAddr   string
	Routes        []string
	RoutePassword string
}

// routeUser is the user the servers of a cluster present to each other.
const routeUser = "routes"

// StartNATS starts a NATS server with JetStream and waits until it accepts
// connections. The caller shuts it down with Shutdown and WaitForShutdown.
func StartNATS(o NATSOptions) (*server.Server, error) {
	host, port, err := splitAddr(o.Addr)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("nats store: %w", err)
	}
	opts := &server.Options{
		ServerName:         "pinion",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           o.Dir,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         o.MaxPayload,
		SyncInterval:       o.SyncInterval,
		SyncAlways:         o.SyncAlways,
		JetStreamMaxMemory: 256 << 20,
		DontListen:         o.NoListen,
		Users:              o.Users,
	}
	if o.ClusterAddr != "" {
		if err := o.cluster(opts); err != nil {
			return nil, err
		}
	}
	if !o.NoListen && len(o.Users) == 0 {
		return nil, errors.New("nats: a server that listens must require credentials")
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 9 << 20
	}
	// Pending buffers must hold a few maximal messages.
	opts.MaxPending = int64(opts.MaxPayload) * 8
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats: not ready after 15s (is the port taken?)")
	}
	return ns, nil
}

// cluster sets opts for a server that routes to others.
func (o NATSOptions) cluster(opts *server.Options) error {
	if o.RoutePassword == "" {
		return errors.New("nats cluster: no route password")
	}
	host, port, err := splitAddr(o.ClusterAddr)
	if err != nil || port <= 0 {
		return fmt.Errorf("nats cluster: address %q needs a fixed port", o.ClusterAddr)
	}
	opts.ServerName = fmt.Sprintf("pinion-%d", port)
	opts.Cluster = server.ClusterOpts{Name: "pinion", Host: host, Port: port, Username: routeUser, Password: o.RoutePassword}
	for _, r := range o.Routes {
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", User: url.UserPassword(routeUser, o.RoutePassword), Host: r})
	}
	return nil
}

// FerretDB is a running embedded FerretDB.
type FerretDB struct {
	URI    string
	cancel context.CancelFunc
	done   chan struct{}
}

// FerretOptions configures the embedded FerretDB.
type FerretOptions struct {
	// Dir holds the SQLite files (ignored with PostgreSQLURL).
	Dir string
	// PostgreSQLURL switches the backend from SQLite to a PostgreSQL server.
	PostgreSQLURL string
	// Addr is host:port to listen on (port 0 picks a free one). A TCP
	// listener takes connections from anyone who can reach it, with no
	// password: without Addr, FerretDB listens on a Unix socket in Dir
	// instead, which only this user can open.
	Addr   string
	Logger *slog.Logger
}

// socketName is the embedded FerretDB's Unix socket, in a directory of its
// own (mode 0700) under the store's.
const socketName = "ferretdb.sock"

// socketPath is where the embedded FerretDB of store directory dir
// listens when it has no TCP address.
func socketPath(dir string) (string, error) {
	run, err := filepath.Abs(filepath.Join(dir, "run"))
	if err != nil {
		return "", err
	}
	socket := filepath.Join(run, socketName)
	if len(socket) > 100 {
		return "", fmt.Errorf("ferretdb: the socket path %s is too long for a Unix socket; use a shorter data directory", socket)
	}
	return socket, nil
}

// FerretURI is the MongoDB URI of the embedded FerretDB that another
// process runs with o (its Unix socket in o.Dir, or o.Addr), for a tool
// that reads the store beside it.
func FerretURI(o FerretOptions) (string, error) {
	if o.Addr != "" {
		return "mongodb://" + o.Addr + "/", nil
	}
	socket, err := socketPath(o.Dir)
	if err != nil {
		return "", err
	}
	return "mongodb://" + url.PathEscape(socket) + "/", nil
}

// StartFerretDB starts FerretDB and returns its MongoDB URI.
func StartFerretDB(o FerretOptions) (*FerretDB, error) {
	cfg := &ferretdb.Config{Logger: o.Logger}
	var socket string
	if o.Addr != "" {
		cfg.Listener.TCP = o.Addr
	} else {
		var err error
		if socket, err = socketPath(o.Dir); err != nil {
			return nil, err
		}
		dir := filepath.Dir(socket)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("ferretdb socket directory: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("ferretdb socket directory: %w", err)
		}
		_ = os.Remove(socket) // left by a process that was killed
		cfg.Listener.Unix = socket
	}
	if cfg.Logger == nil {
		// FerretDB logs every connection at info and every command it lacks
		// (such as the driver's endSessions) at warn; only its errors matter.
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if o.PostgreSQLURL != "" {
		cfg.Handler = "postgresql"
		cfg.PostgreSQLURL = o.PostgreSQLURL
	} else {
		dir, err := filepath.Abs(o.Dir)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("ferretdb store: %w", err)
		}
		cfg.Handler = "sqlite"
		cfg.SQLiteURL = "file:" + dir + "/"
	}
	f, err := ferretdb.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("ferretdb: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	// Wait until the listener accepts connections.
	network, addr, uri := "unix", socket, "mongodb://"+url.PathEscape(socket)+"/"
	if socket == "" {
		uri = f.MongoDBURI()
		network, addr = "tcp", strings.TrimSuffix(strings.TrimPrefix(uri, "mongodb://"), "/")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("ferretdb: not listening on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if socket != "" {
		if err := os.Chmod(socket, 0o600); err != nil {
			cancel()
			return nil, fmt.Errorf("ferretdb socket: %w", err)
		}
	}
	return &FerretDB{URI: uri, cancel: cancel, done: done}, nil
}

// Close stops FerretDB and waits for it to release its files.
func (f *FerretDB) Close() {
	f.cancel()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
	}
}

func splitAddr(addr string) (string, int, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("address %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server: -1 picks a random port
	}
	return host, port, nil
}
