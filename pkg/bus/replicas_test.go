package bus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/testenv/loopback"
)

// cluster starts n JetStream servers on loopback, routed to each other.
func cluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	routes := make([]int, n)
	for i := range routes {
		routes[i] = loopback.FreePort(t)
	}
	var urls []string
	for _, p := range routes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var out []*server.Server
	for i := 0; i < n; i++ {
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(urls, ",")),
			NoLog:   true, NoSigs: true,
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		out = append(out, s)
	}
	for _, s := range out {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("a server did not start")
		}
	}
	// JetStream answers once the servers are routed and have a meta leader.
	eventually(t, "every server routed to the others and JetStream current", func() bool {
		for _, s := range out {
			if !s.JetStreamIsCurrent() || s.NumRoutes() < n-1 {
				return false
			}
		}
		return true
	})
	// A stream is placed only on servers the meta leader has statistics
	// from, which arrive a moment after the routes.
	eventually(t, fmt.Sprintf("the meta leader to see all %d servers online", n), func() bool { return online(out) >= n })
	return out
}

// eventually polls cond until it holds, failing the test, naming what it
// waited for, after 30 s: a cluster's routes and meta leader, or a
// consumer's new leader, take seconds. (testenv.Eventually is built on
// this package, so its tests cannot import it.)
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(pause)
	}
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

// Streams and buckets are created with the replicas asked for, and an
// existing one with fewer is brought up to them.
func TestReplicated(t *testing.T) {
	servers := cluster(t, 3)
	nc, err := nats.Connect(servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"ev.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 1 {
		t.Fatalf("plain stream has %d replicas", r)
	}
	rjs := Replicated(js, 3, nil)
	if s, err = rjs.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"ev.>"}}); err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("updated stream has %d replicas, want 3", r)
	}
	kv, err := rjs.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; c.Replicas != 3 || c.AllowDirect {
		t.Fatalf("bucket has %d replicas (want 3), direct gets %v (want off: followers may lag)", c.Replicas, c.AllowDirect)
	}
	// More replicas than servers: the error names the setting.
	_, err = Replicated(js, 5, nil).CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "TOO_MANY", Subjects: []string{"many.>"}})
	if err == nil || !strings.Contains(err.Error(), "PINION_NATS_REPLICAS") {
		t.Fatalf("5 replicas on 3 servers: %v", err)
	}
}

// Only a server that is offline for the moment is waited for; too few
// servers for the replicas asked for is reported at once.
func TestIsNoPeers(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, true},
		{fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}), true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10023, Description: "insufficient resources, peer offline"}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := isNoPeers(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}

// Subscription retries are messages scheduled on a replicated stream
// (services/botexec): one fires when due after the stream's leader is
// lost, and nothing of it is left once the fired copy is deleted.
func TestScheduledMessageSurvivesLeaderLoss(t *testing.T) {
	servers := cluster(t, 3)
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := Replicated(js, 3, nil).CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "LATER", Subjects: []string{"later.>"}, AllowMsgSchedules: true, AllowRollup: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("later.scheduled.1")
	m.Data = []byte("due")
	m.Header.Set("Nats-Schedule", "@at "+time.Now().Add(3*time.Second).UTC().Format(time.RFC3339Nano))
	m.Header.Set("Nats-Schedule-Target", "later.due.1")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "due", FilterSubject: "later.due.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.Name() == info.Cluster.Leader {
			s.Shutdown()
		}
	}
	got := 0
	eventually(t, "the scheduled message to fire after the leader was lost", func() bool {
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return false // a fetch ends early while the consumer's leader changes: fetch again
		}
		for m := range batch.Messages() {
			got++
			md, _ := m.Metadata()
			if string(m.Data()) != "due" {
				t.Fatalf("fired %q", m.Data())
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			if err := st.DeleteMsg(ctx, md.Sequence.Stream); err != nil {
				t.Fatal(err)
			}
		}
		return got > 0
	})
	if got != 1 {
		t.Fatalf("%d scheduled messages fired after the leader was lost, want 1", got)
	}
	if info, err = st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("%v messages left (%v), want none", info.State.Msgs, err)
	}
}
