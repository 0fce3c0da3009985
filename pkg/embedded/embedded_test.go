package embedded

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

func TestServersAnswer(t *testing.T) {
	dir := t.TempDir()
	ns, err := StartNATS(NATSOptions{Dir: dir + "/nats", NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("jetstream: %v", err)
	}

	f, err := StartFerretDB(FerretOptions{Dir: dir + "/db"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(f.URI))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(ctx)
	coll := c.Database("t").Collection("c")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	var got bson.M
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["n"] != int32(1) {
		t.Fatalf("got %v", got)
	}
}

// testUsers are new passwords and Pinion's users with them.
func testUsers(t *testing.T) (map[string]string, []*server.User) {
	t.Helper()
	pw, err := NATSPasswords(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	users, err := NATSUsers(pw)
	if err != nil {
		t.Fatal(err)
	}
	return pw, users
}

// A NATS server that listens takes only Pinion's users, each held to its
// process's rights: no one else can send a service request (which carries
// its caller as a header) or read the bus.
func TestNATSListenerRequiresCredentials(t *testing.T) {
	if _, err := StartNATS(NATSOptions{Dir: t.TempDir(), Addr: "127.0.0.1:0"}); err == nil {
		t.Fatal("a listening server without users started")
	}
	pw, users := testUsers(t)
	ns, err := StartNATS(NATSOptions{Dir: t.TempDir(), Addr: "127.0.0.1:0", Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	addr := ns.Addr().String()
	if nc, err := nats.Connect("nats://" + addr); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	}
	if nc, err := nats.Connect("nats://gateway:wrong@" + addr); err == nil {
		nc.Close()
		t.Fatal("a wrong password was accepted")
	}
	// A service that answers reads, as the fhir service would.
	fhirConn, err := nats.Connect("nats://fhir:" + pw["fhir"] + "@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fhirConn.Close()
	// A FHIR route's subject (bus.SubjectOf("GET", "/fhir/R4/:type/:id")):
	// bots call the FHIR routes through botexec.
	const read = "pinion.fhir.GET.fhir.R4.:type.:id"
	if _, err := fhirConn.Subscribe(read, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	_ = fhirConn.Flush()
	for user, allowed := range map[string]bool{"gateway": true, "botexec": true, "identity": false, "membership": false} {
		nc, err := nats.Connect("nats://"+user+":"+pw[user]+"@"+addr, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = nc.Request(read, []byte("forged principal"), time.Second)
		nc.Close()
		if (err == nil) != allowed {
			t.Errorf("%s sends a service request: %v, want allowed %v", user, err, allowed)
		}
	}
}

// Three embedded servers form a cluster over password-protected routes and
// keep a stream on all three; a server with the wrong route password is
// not let in.
func TestNATSCluster(t *testing.T) {
	pw, users := testUsers(t)
	routes := []string{loopback.FreeAddr(t), loopback.FreeAddr(t), loopback.FreeAddr(t)}
	start := func(i int, password string) *server.Server {
		ns, err := StartNATS(NATSOptions{Dir: t.TempDir(), Addr: "127.0.0.1:0", Users: users,
			ClusterAddr: routes[i], Routes: routes, RoutePassword: password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ns.Shutdown)
		return ns
	}
	servers := []*server.Server{start(0, pw[RoutePasswordKey]), start(1, pw[RoutePasswordKey]), start(2, pw[RoutePasswordKey])}
	eventually(t, "each server routed to the other two and JetStream current", func() bool {
		for _, s := range servers {
			if peers(t, s) < 2 || !s.JetStreamIsCurrent() {
				return false
			}
		}
		return true
	})
	// A bucket is placed only on servers the meta leader has statistics
	// from, which arrive a moment after the routes.
	eventually(t, "the meta leader to see all 3 servers online", func() bool { return online(servers) >= 3 })
	nc, err := nats.Connect("nats://identity:" + pw["identity"] + "@" + servers[1].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "pinion_logins", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Status(ctx); st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatal("bucket not on three servers")
	}
	// A fourth server with a wrong password: the others refuse its routes.
	// Each refusal is logged where the route arrives; once every server has
	// refused the intruder, none of them may hold a route to it. (The
	// intruder itself lists a route for a moment while each attempt is
	// being refused, so only the servers that must refuse it tell whether
	// one was accepted.)
	refused := make([]*routeRefusals, len(servers))
	for i, s := range servers {
		refused[i] = &routeRefusals{}
		s.SetLogger(refused[i], false, false)
	}
	intruder, err := StartNATS(NATSOptions{Dir: t.TempDir(), Addr: "127.0.0.1:0", Users: users,
		ClusterAddr: loopback.FreeAddr(t), Routes: routes, RoutePassword: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Shutdown()
	eventually(t, "every server to refuse the intruder's route", func() bool {
		for _, r := range refused {
			if r.n.Load() == 0 {
				return false
			}
		}
		return true
	})
	for i, s := range servers {
		if routesTo(t, s, intruder.ID()) {
			t.Fatalf("server %d accepted a route from a server with the wrong route password", i)
		}
	}
	if n := peers(t, servers[0]); n != 2 {
		t.Fatalf("the cluster's first server has %d peers, want 2", n)
	}
}

// routeRefusals is a server's log, counting the route connections it
// refused for their credentials.
type routeRefusals struct{ n atomic.Int32 }

func (r *routeRefusals) Errorf(format string, v ...any) {
	// A route's lines name it "rid:"; a refusal is the authentication error.
	if line := fmt.Sprintf(format, v...); strings.Contains(line, " - rid:") && strings.Contains(line, server.ErrAuthentication.Error()) {
		r.n.Add(1)
	}
}
func (*routeRefusals) Noticef(string, ...any) {}
func (*routeRefusals) Warnf(string, ...any)   {}
func (*routeRefusals) Fatalf(string, ...any)  {}
func (*routeRefusals) Debugf(string, ...any)  {}
func (*routeRefusals) Tracef(string, ...any)  {}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after 20 s: a cluster's routes and meta leader take
// seconds. (testenv.Eventually is built on this package, so its tests
// cannot import it.)
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
		time.Sleep(pause)
	}
}

// routesTo reports whether s has a route to the server with id.
func routesTo(t *testing.T, s *server.Server, id string) bool {
	t.Helper()
	rz, err := s.Routez(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rz.Routes {
		if r.RemoteID == id {
			return true
		}
	}
	return false
}

// online is how many servers the cluster's meta leader offers for placement.
func online(servers []*server.Server) int {
	for _, s := range servers {
		if p := s.JetStreamClusterPeers(); p != nil {
			return len(p)
		}
	}
	return 0
}

// peers counts the servers s has routes to (a pool of connections each).
func peers(t *testing.T, s *server.Server) int {
	t.Helper()
	rz, err := s.Routez(nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rz.Routes {
		ids[r.RemoteID] = true
	}
	return len(ids)
}
