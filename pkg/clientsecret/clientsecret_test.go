package clientsecret

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pinion-health/pinion/pkg/store/sqlstore"
)

func openStore(t *testing.T) *sqlstore.Store {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{Sync: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// storeRecord puts a credentials record holding a sealed secret, as the
// identity service stores one.
func storeRecord(t *testing.T, st *sqlstore.Store, clientID, sealed string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"id": Key(clientID), "digest": "d", "shown": sealed})
	if err := st.SetSecret(context.Background(), Key(clientID), b); err != nil {
		t.Fatal(err)
	}
}

func TestSealAndShow(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	k := New(st)
	sealed, err := k.Seal(ctx, "c1", "the secret")
	if err != nil {
		t.Fatal(err)
	}
	if sealed == "" || sealed == "the secret" {
		t.Fatalf("sealed %q", sealed)
	}
	storeRecord(t, st, "c1", sealed)
	if For(st) != For(st) {
		t.Error("two keepers for one store")
	}
	// Another instance (another Keeper on the same store) opens it.
	if got, err := New(st).Shown(ctx, "c1"); err != nil || got != "the secret" {
		t.Fatalf("shown %q %v", got, err)
	}

	cases := []struct {
		name, client string
		record       any // nil: no record
		want         string
		fails        bool
	}{
		{"no credentials", "none", nil, "", false},
		{"credentials kept before secrets were", "old", map[string]any{"digest": "d"}, "", false},
		{"sealed for another client", "c2", map[string]any{"shown": sealed}, "", true},
		{"not base64", "c3", map[string]any{"shown": "%%%"}, "", true},
		{"too short", "c4", map[string]any{"shown": "AAAA"}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.record != nil {
				b, _ := json.Marshal(c.record)
				if err := st.SetSecret(ctx, Key(c.client), b); err != nil {
					t.Fatal(err)
				}
			}
			got, err := k.Shown(ctx, c.client)
			if (err != nil) != c.fails || got != c.want {
				t.Fatalf("%q %v, want %q (fails: %v)", got, err, c.want, c.fails)
			}
		})
	}
}

// Instances starting at once end with one sealing key: what one seals,
// every other opens.
func TestOneSealingKey(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	keepers := make([]*Keeper, 8)
	sealed := make([]string, len(keepers))
	var wg sync.WaitGroup
	for i := range keepers {
		keepers[i] = New(st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := keepers[i].Seal(ctx, "c", "s")
			if err != nil {
				t.Error(err)
			}
			sealed[i] = s
		}()
	}
	wg.Wait()
	for i, s := range sealed {
		storeRecord(t, st, "c", s)
		if got, err := keepers[(i+1)%len(keepers)].Shown(ctx, "c"); err != nil || got != "s" {
			t.Fatalf("sealed by %d: %q %v", i, got, err)
		}
	}
}
