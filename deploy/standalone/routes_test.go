package standalone

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/pinion-health/pinion/pkg/bus"
)

// Every subject of the route table is served by exactly one service of
// the running stack, as the services themselves report (NATS micro's
// $SRV.INFO): a route whose subject no one serves, or two services do, is
// caught here rather than by a caller's 503.
func TestEverySubjectServedOnce(t *testing.T) {
	nc := stack.conns.NC
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO", inbox, nil); err != nil {
		t.Fatal(err)
	}
	served := map[string][]string{}
	for {
		m, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			break
		}
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err != nil {
			t.Fatal(err)
		}
		for _, e := range info.Endpoints {
			served[e.Subject] = append(served[e.Subject], info.Name)
		}
	}
	if len(served) == 0 {
		t.Fatal("no service answered $SRV.INFO")
	}
	for _, r := range bus.Routes {
		if got := served[r.Subject]; len(got) != 1 {
			t.Errorf("%s %s → %s is served by %v", r.Method, r.Path, r.Subject, got)
		}
	}
}
