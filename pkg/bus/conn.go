package bus

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect opens a NATS connection named for the component. With inProcess
// set (the embedded server of the standalone process) no socket is used.
// The server's asynchronous errors (a permission refused, a slow consumer)
// go to log, structured like every other line, rather than to the client
// library's plain-text default.
func Connect(url, name string, inProcess nats.InProcessConnProvider, log *slog.Logger) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("nats asynchronous error", "err", err, "subscription", subject)
		}),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		// Keep publishing through short outages: buffered, then flushed.
		nats.ReconnectBufSize(64 << 20),
	}
	if inProcess != nil {
		opts = append(opts, nats.InProcessServer(inProcess))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", url, err)
	}
	return nc, nil
}
