package repo

import (
	"context"
	"sync"
	"testing"

	"github.com/pinion-health/pinion/pkg/store"
)

// strictSeen records, per type, whether the writes that reached the store
// asked to be unreadable until durable.
type strictSeen struct {
	store.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (s *strictSeen) Write(ctx context.Context, ws ...*store.Write) error {
	s.mu.Lock()
	for _, w := range ws {
		s.seen[w.Type+" "+map[bool]string{true: "deleted", false: "written"}[w.Deleted]] = w.Strict
	}
	s.mu.Unlock()
	return s.Store.Write(ctx, ws...)
}

// Writes that grant or revoke access are strict, in a create, an update
// and a delete alike; a clinical resource's are not.
func TestAccessWritesAreStrict(t *testing.T) {
	ctx := context.Background()
	rec := &strictSeen{Store: st, seen: map[string]bool{}}
	r := instanceOn(t, rec)
	sc := Scope{Project: "strict"}
	m, err := r.Create(ctx, sc, map[string]any{"resourceType": "ProjectMembership", "project": map[string]any{"reference": "Project/strict"}, "user": map[string]any{"reference": "User/u"}, "profile": map[string]any{"reference": "Practitioner/p"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, sc, "ProjectMembership", m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, sc, patient("Plain"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"ProjectMembership written": true, "ProjectMembership deleted": true, "Patient written": false} {
		got, ok := rec.seen[key]
		if !ok {
			t.Errorf("no %s reached the store", key)
		} else if got != want {
			t.Errorf("%s: Strict %v, want %v", key, got, want)
		}
	}
}
