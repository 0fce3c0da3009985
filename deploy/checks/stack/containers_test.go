package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmongo "github.com/testcontainers/testcontainers-go/modules/mongodb"
	tcnats "github.com/testcontainers/testcontainers-go/modules/nats"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/deploy/checks/internal/deployfiles"
	"github.com/pinion-health/pinion/deploy/standalone"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/mongostore"
	"github.com/pinion-health/pinion/pkg/store/storetest"
)

// TestStoryOnContainers runs the main user story against the real mongo
// and nats images docker-compose.yml pins (MongoDB as a one-node replica
// set, so majority writes are real), with Pinion's services and gateway in
// this process (standalone.Start with external servers). It needs a
// container engine and skips, saying so, where none is reachable.
func TestStoryOnContainers(t *testing.T) {
	requireContainerEngine(t, "runs the story on the mongo and nats images")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	root, err := deployfiles.Root()
	if err != nil {
		t.Fatal(err)
	}
	project, err := deployfiles.Compose(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	mongoURI := startMongo(t, ctx, project.Services["mongo"].Image)
	natsC, err := tcnats.Run(ctx, deployfiles.NATSServers(project)[0].Image)
	testcontainers.CleanupContainer(t, natsC)
	if err != nil {
		t.Fatalf("nats container: %v", err)
	}
	natsURL, err := natsC.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	superID, superSecret := "containers-superadmin", strings.Repeat("c0ntainers-", 4)
	env := map[string]string{
		"PINION_ADDR":                     "127.0.0.1:0",
		"PINION_DATA_DIR":                 dataDir,
		"PINION_MONGODB_URI":              mongoURI,
		"PINION_NATS_URL":                 natsURL,
		"PINION_SUPERADMIN_CLIENT_ID":     superID,
		"PINION_SUPERADMIN_CLIENT_SECRET": superSecret,
		"PINION_LOG_LEVEL":                "warn",
	}
	cfg, err := config.LoadFrom(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := standalone.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("start against the containers: %v", err)
	}
	t.Cleanup(st.Close)

	c := newClient(t, "http://"+st.Addr+"/")
	c.waitReady(30 * time.Second)
	runStory(t, c, superID, superSecret, storyOptions{
		mailDir: func() []string {
			m, _ := filepath.Glob(filepath.Join(dataDir, "mail", "*.eml"))
			return m
		},
	})
}

// TestStoreConformanceOnMongo holds the MongoDB adapter to the storage
// conformance suite on the real mongo image (a one-node replica set), as
// pkg/store/mongostore's own test does on the embedded FerretDB. A replica
// set runs transactions, so here several writes in one call must be
// atomic.
func TestStoreConformanceOnMongo(t *testing.T) {
	requireContainerEngine(t, "runs the storage conformance suite on the mongo image")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := deployfiles.Root()
	if err != nil {
		t.Fatal(err)
	}
	project, err := deployfiles.Compose(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(startMongo(t, ctx, project.Services["mongo"].Image)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		s, err := mongostore.Open(ctx, client.Database(fmt.Sprintf("conformance_%d", n)), mongostore.Options{IndexKeys: search.IndexKeys})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Transactional() {
			t.Fatal("the adapter found no transactions on a replica set")
		}
		return s
	})
}

// startMongo runs the mongo image as a one-node replica set (so majority
// writes are real) and returns its URI.
func startMongo(t *testing.T, ctx context.Context, image string) string {
	t.Helper()
	mongoC, err := tcmongo.Run(ctx, image, tcmongo.WithReplicaSet("rs0"))
	testcontainers.CleanupContainer(t, mongoC)
	if err != nil {
		t.Fatalf("mongo container: %v", err)
	}
	uri, err := mongoC.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The replica set's member address is the container's own; reach the
	// one member directly through the mapped port.
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("directConnection", "true")
	u.RawQuery = q.Encode()
	return u.String()
}

// requireContainerEngine skips the test, saying why, when testcontainers
// finds no healthy container engine (Docker or a compatible one, through
// DOCKER_HOST or the usual sockets).
func requireContainerEngine(t *testing.T, what string) {
	t.Helper()
	why := "no container engine reachable (%v): this test " + what + "; run it where Docker works (deploy/checks/README.md)"
	defer func() {
		// testcontainers panics when it finds no Docker at all.
		if r := recover(); r != nil {
			t.Skipf(why, r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		t.Skipf(why, err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		t.Skipf(why, err)
	}
}
