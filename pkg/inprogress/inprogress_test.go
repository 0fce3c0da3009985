package inprogress

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/testenv"
)

// A message kept in progress is not delivered again while kept, however
// long past its AckWait; once no longer kept, it is.
func TestKeep(t *testing.T) {
	ctx := context.Background()
	js := testenv.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
		t.Fatal(err)
	}
	c, err := js.CreateConsumer(ctx, "KEEP", jetstream.ConsumerConfig{Durable: "k", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep.x", []byte("work")); err != nil {
		t.Fatal(err)
	}
	next := func(wait time.Duration) jetstream.Msg {
		b, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			return m
		}
		return nil
	}
	m := next(5 * time.Second)
	if m == nil {
		t.Fatal("nothing delivered")
	}
	stop := Keep(m, 250*time.Millisecond)
	// Three AckWaits: without the keeping, it would come round again.
	if again := next(3 * time.Second); again != nil {
		t.Fatal("delivered again while kept")
	}
	stop()
	if again := next(5 * time.Second); again == nil {
		t.Fatal("not delivered again once no longer kept")
	}
}
