package standalone

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// bucketTraffic counts the reads and writes of one invite's record in its
// bucket, as the bus carries them: a write is a publish on the record's
// subject, a read a (direct or stream) message get of it.
type bucketTraffic struct {
	mu            sync.Mutex
	reads, writes map[string]int // by invite id
}

func watchBucketTraffic(t *testing.T, nc *nats.Conn) *bucketTraffic {
	t.Helper()
	bt := &bucketTraffic{reads: map[string]int{}, writes: map[string]int{}}
	keyPrefix := "$KV." + invite.Bucket + "."
	count := func(m map[string]int, key string) {
		bt.mu.Lock()
		m[key]++
		bt.mu.Unlock()
	}
	subs := map[string]nats.MsgHandler{
		keyPrefix + ">": func(m *nats.Msg) { count(bt.writes, strings.TrimPrefix(m.Subject, keyPrefix)) },
		"$JS.API.DIRECT.GET.KV_" + invite.Bucket + ".>": func(m *nats.Msg) {
			_, key, _ := strings.Cut(m.Subject, keyPrefix)
			count(bt.reads, key)
		},
		"$JS.API.STREAM.MSG.GET.KV_" + invite.Bucket: func(m *nats.Msg) {
			var req struct {
				LastBySubject string `json:"last_by_subj"`
			}
			_ = json.Unmarshal(m.Data, &req)
			count(bt.reads, strings.TrimPrefix(req.LastBySubject, keyPrefix))
		},
	}
	for subject, h := range subs {
		sub, err := nc.Subscribe(subject, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return bt
}

// only returns the one invite seen, with its counts.
func (bt *bucketTraffic) only(t *testing.T) (id string, reads, writes int) {
	t.Helper()
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if len(bt.writes) != 1 {
		t.Fatalf("writes of %d invites, want 1: %v", len(bt.writes), bt.writes)
	}
	for k := range bt.writes {
		id = k
	}
	return id, bt.reads[id], bt.writes[id]
}

// An invite reads and writes its record in the bucket a bounded number of
// times: the steps carry what later steps need, and each step records its
// result once.
func TestInviteBucketTraffic(t *testing.T) {
	pid, su := adminProject(t, "Bucket traffic")
	nc, err := nats.Connect("", nats.InProcessServer(stack.NATSServer()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bt := watchBucketTraffic(t, nc)

	email := "bucket-traffic@example.com"
	r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Tra", "lastName", "Ffic", "email", email))
	expect(t, r, 200)
	mailTo(t, email)

	// The last write is the courier's record of the e-mail: wait for it.
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitLimit)
	defer cancel()
	kv, err := js.KeyValue(ctx, invite.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := bt.only(t)
	w, err := kv.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for e := range w.Updates() {
		var rec invite.Record
		if e != nil && json.Unmarshal(e.Value(), &rec) == nil && rec.Steps[invite.StepEmail].State == "done" {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the e-mail step was never recorded done")
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, reads, writes := bt.only(t)
	t.Logf("invite %s: %d reads, %d writes of its record", id, reads, writes)
	if reads > maxInviteReads || writes > maxInviteWrites {
		t.Errorf("%d reads and %d writes of the record, want at most %d and %d", reads, writes, maxInviteReads, maxInviteWrites)
	}
}

// The record's traffic for an invite of a new user with an e-mail: created
// by the request; read once and written once by each of the user, profile
// and membership steps; read by the e-mail step; read and written by the
// courier that sends the e-mail. The request learns the outcome from the
// announcement of the end. (Before, each step read it twice and the
// request once more: 8 reads.)
const (
	maxInviteReads  = 5
	maxInviteWrites = 5
)
