package authserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/pinion-health/pinion/pkg/egress"
	"github.com/pinion-health/pinion/pkg/testenv"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// hangingServer accepts a key set request and answers nothing until the
// test ends; it counts the requests.
func hangingServer(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return
	return srv.URL + "/jwks.json", &hits
}

// A key set is never fetched from loopback or private addresses unless
// that is allowed, nor through a redirect.
func TestKeySetAddressAndRedirect(t *testing.T) {
	k := newTestKeys(t)
	good := testkit.KeySetJSON(t, jose.JSONWebKey{Key: k.ec.Public(), KeyID: "k1", Use: "sig"})
	uri, hits := testkit.JWKSServer(t, 200, func() []byte { return good })
	ctx := context.Background()

	_, err := newAssertions(false).keys(ctx, uri, "k1")
	if !errors.Is(err, errNoKeySet) || !errors.Is(err, egress.ErrPrivateAddress) {
		t.Fatalf("loopback key set: %v, want a refused private address", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the refused fetch reached the server")
	}
	if set, err := newAssertions(true).keys(ctx, uri, "k1"); err != nil || len(set.Keys) != 1 {
		t.Fatalf("allowed, the same set: %v", err)
	}

	var targetHits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/jwks.json", http.StatusFound)
			return
		}
		targetHits.Add(1)
		_, _ = w.Write(good)
	}))
	t.Cleanup(srv.Close)
	if _, err := newAssertions(true).keys(ctx, srv.URL+"/moved", "k1"); !errors.Is(err, errNoKeySet) {
		t.Fatalf("redirected key set: %v, want errNoKeySet", err)
	}
	if targetHits.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// A failed fetch is remembered: the URI is not asked again within
// jwksFailTTL, and is after it.
func TestKeySetFailureCached(t *testing.T) {
	uri, hits := testkit.JWKSServer(t, 500, func() []byte { return []byte("down") })
	a := newAssertions(true)
	ctx := context.Background()
	for i := range 3 {
		if _, err := a.keys(ctx, uri, "k1"); !errors.Is(err, errNoKeySet) {
			t.Fatalf("attempt %d: %v, want errNoKeySet", i, err)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d fetches within the failure window, want 1", n)
	}
	set, _ := a.sets.Get(uri)
	set.fetched = time.Now().Add(-jwksFailTTL - time.Second)
	if _, err := a.keys(ctx, uri, "k1"); !errors.Is(err, errNoKeySet) {
		t.Fatalf("after the window: %v", err)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d fetches after the window, want 2", n)
	}
}

// A hanging jwksUri holds one fetch slot however many requests name it, so
// other clients' key sets, cached or on a server that answers, come at
// once; when hanging servers hold every slot, a fetch fails at once
// rather than queueing behind them, and cached sets still come.
func TestHangingKeySetDelaysNoOne(t *testing.T) {
	k := newTestKeys(t)
	good := testkit.KeySetJSON(t, jose.JSONWebKey{Key: k.ec.Public(), KeyID: "k1", Use: "sig"})
	a := newAssertions(true)
	cachedURI, _ := testkit.JWKSServer(t, 200, func() []byte { return good })
	if _, err := a.keys(context.Background(), cachedURI, "k1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // the waiting requests give up when the test ends
	hang := func(uri string, n int) {
		for range n {
			wg.Go(func() { _, _ = a.keys(ctx, uri, "k1") })
		}
	}
	quick := func(t *testing.T, uri string) (time.Duration, error) {
		t.Helper()
		start := time.Now()
		_, err := a.keys(ctx, uri, "k1")
		return time.Since(start), err
	}
	const bound = 300 * time.Millisecond

	slow, slowHits := hangingServer(t)
	hang(slow, 3*jwksFetchers)
	testenv.Eventually(t, "the hanging server's request", func() bool { return slowHits.Load() > 0 })
	if d, err := quick(t, cachedURI); err != nil || d > bound {
		t.Errorf("a cached key set took %s (%v)", d, err)
	}
	fastURI, _ := testkit.JWKSServer(t, 200, func() []byte { return good })
	if d, err := quick(t, fastURI); err != nil || d > bound {
		t.Errorf("a key set on a server that answers took %s (%v)", d, err)
	}
	if n := slowHits.Load(); n != 1 {
		t.Errorf("%d fetches of one hanging URI, want 1", n)
	}

	// Every slot held by a hanging server.
	var held []*atomic.Int32
	for range jwksFetchers - 1 {
		uri, hits := hangingServer(t)
		hang(uri, 1)
		held = append(held, hits)
	}
	testenv.Eventually(t, "every slot held", func() bool {
		for _, h := range held {
			if h.Load() == 0 {
				return false
			}
		}
		return true
	})
	otherURI, otherHits := testkit.JWKSServer(t, 200, func() []byte { return good })
	if d, err := quick(t, otherURI); !errors.Is(err, errFetchBusy) || d > bound {
		t.Errorf("with every slot held, a fetch: %v after %s, want errFetchBusy at once", err, d)
	}
	if otherHits.Load() != 0 {
		t.Error("a fetch ran beyond the slots")
	}
	if d, err := quick(t, cachedURI); err != nil || d > bound {
		t.Errorf("with every slot held, a cached key set took %s (%v)", d, err)
	}
}
