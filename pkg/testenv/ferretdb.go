package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/embedded"
)

// FerretDB starts an embedded FerretDB, a real MongoDB wire-protocol
// server, in a temporary directory, and connects a client to it: for a
// package's TestMain (or a sync.Once), as it outlives any one test. stop
// disconnects, stops the server and removes the directory.
func FerretDB() (_ *mongo.Client, stop func(), err error) {
	dir, err := os.MkdirTemp("", "pinion-ferretdb-")
	if err != nil {
		return nil, nil, err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	f, err := embedded.StartFerretDB(embedded.FerretOptions{Dir: dir, Logger: quiet})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start FerretDB: %w", err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(f.URI))
	if err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("connect to FerretDB: %w", err)
	}
	return client, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
		f.Close()
		os.RemoveAll(dir)
	}, nil
}
