// Package inprogress keeps a JetStream message that takes long to handle
// from being delivered again to another consumer meanwhile: it tells the
// server the work goes on, every so often, until stopped.
package inprogress

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Keep sends m's in-progress acknowledgement every interval (a third of
// the consumer's AckWait is usual) until the returned stop, which returns
// once no more will be sent.
func Keep(m jetstream.Msg, every time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done); <-stopped }
}
