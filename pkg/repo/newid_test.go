package repo

import (
	"context"
	"testing"

	"github.com/google/uuid"
)

// TestNewIDsFollowCreation: the ids the repository gives new resources
// sort in the order they were made (so the store's index of ids grows at
// its end), and are UUIDs still.
func TestNewIDsFollowCreation(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	prev := ""
	for i := 0; i < 20; i++ {
		res, err := r.Create(ctx, Scope{Project: "p"}, patient("Order"), WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := uuid.Parse(res.ID); err != nil || len(res.ID) != 36 {
			t.Fatalf("id %q is not a UUID: %v", res.ID, err)
		}
		if res.ID <= prev {
			t.Fatalf("create %d: id %s sorts before the previous create's %s", i, res.ID, prev)
		}
		prev = res.ID
	}
	for i, a := 0, NewID(); i < 1000; i++ {
		b := NewID()
		if b <= a {
			t.Fatalf("NewID %s after %s", b, a)
		}
		a = b
	}
}
