package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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

// A NATS server that listens takes only Pinion's users, each held to its
// process's rights: no one else can send a service request (which carries
// its caller as a header) or read the bus.
func TestNATSListenerRequiresCredentials(t *testing.T) {
	if _, err := StartNATS(NATSOptions{Dir: t.TempDir(), Addr: "127.0.0.1:0"}); err == nil {
		t.Fatal("a listening server without users started")
	}
	pw, err := NATSPasswords(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	users, err := NATSUsers(pw)
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := fhirConn.Subscribe("pinion.fhir.read", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	_ = fhirConn.Flush()
	for user, allowed := range map[string]bool{"gateway": true, "botexec": true, "identity": false, "membership": false} {
		nc, err := nats.Connect("nats://"+user+":"+pw[user]+"@"+addr, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = nc.Request("pinion.fhir.read", []byte("forged principal"), time.Second)
		nc.Close()
		if (err == nil) != allowed {
			t.Errorf("%s sends a service request: %v, want allowed %v", user, err, allowed)
		}
	}
}
