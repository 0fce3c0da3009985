package mongostore

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/pinion-health/pinion/pkg/store"
	"github.com/pinion-health/pinion/pkg/store/storetest"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// The adapter runs the conformance suite against the embedded FerretDB, a
// real MongoDB wire-protocol server. FerretDB has no transactions, so the
// suite's atomicity of several writes in one call is not asked of it (the
// container test in deploy/checks/stack asks it of a replica set).
var client *mongo.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, stop, err := testenv.FerretDB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	client = c
	return m.Run()
}

var seq atomic.Int64

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		db := client.Database(fmt.Sprintf("conformance_%d", seq.Add(1)))
		t.Cleanup(func() { _ = db.Drop(context.Background()) })
		s, err := Open(context.Background(), db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Transactional() {
			t.Fatal("the adapter expects transactions of FerretDB, which has none")
		}
		return s
	}, storetest.Options{NotAtomic: true})
}
