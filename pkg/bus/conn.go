package bus

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect opens a NATS connection named for the component. With inProcess
// set (the embedded server of the standalone process) no socket is used.
func Connect(url, name string, inProcess nats.InProcessConnProvider) (*nats.Conn, error) {
	opts := []nats.Option{
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
