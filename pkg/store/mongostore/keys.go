package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/pinion-health/pinion/pkg/store"
)

// Claims rest on the _id index of unique_keys, which makes "first claim
// wins" hold under concurrency on FerretDB and MongoDB alike.
type claimDoc struct {
	ID    string `bson:"_id"`
	Owner string `bson:"owner"`
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, key, owner string) (string, error) {
	_, err := s.db.Collection(claimsColl).InsertOne(ctx, claimDoc{ID: key, Owner: owner})
	if err == nil {
		return owner, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return "", fmt.Errorf("claim %s: %w", key, err)
	}
	return s.ClaimOwner(ctx, key)
}

// ClaimOwner implements store.Store.
func (s *Store) ClaimOwner(ctx context.Context, key string) (string, error) {
	var d claimDoc
	err := s.db.Collection(claimsColl).FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim %s: %w", key, err)
	}
	return d.Owner, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if _, err := s.db.Collection(claimsColl).DeleteOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "owner", Value: owner}}); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

type outboxRecord struct {
	ID      string    `bson:"_id"`
	Event   []byte    `bson:"event"`
	Type    string    `bson:"type"`
	Res     string    `bson:"res"`
	Version string    `bson:"v"`
	At      time.Time `bson:"at"`
}

func outboxDoc(w *store.Write) outboxRecord {
	return outboxRecord{ID: store.OutboxID(w.Type, w.ID, w.Version), Event: w.Event, Type: w.Type, Res: w.ID,
		Version: w.Version, At: time.Now().UTC()}
}

// Pending implements store.Store: an event is pending once its version is
// in the history; one whose version never appeared is dropped after abandon.
func (s *Store) Pending(ctx context.Context, before, abandon time.Time) ([]store.Pending, error) {
	cur, err := s.db.Collection(outboxColl).Find(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetLimit(1000))
	if err != nil {
		return nil, err
	}
	var docs []outboxRecord
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	var out []store.Pending
	for _, d := range docs {
		err := s.history(d.Type).FindOne(ctx, bson.D{{Key: fID, Value: d.Res + "/" + d.Version}}).Err()
		switch {
		case err == nil:
			out = append(out, store.Pending{ID: d.ID, Event: d.Event})
		case errors.Is(err, mongo.ErrNoDocuments):
			if d.At.Before(abandon) {
				_, _ = s.db.Collection(outboxColl).DeleteOne(ctx, bson.D{{Key: "_id", Value: d.ID}})
			}
		default:
			return out, err
		}
	}
	return out, nil
}

// ClearOutbox implements store.Store.
func (s *Store) ClearOutbox(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.db.Collection(outboxColl).DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	return err
}

// secretDoc holds one secret's bytes. The documents identity wrote into
// credentials before the storage port (one shape per purpose) are not read:
// no MongoDB deployment existed to migrate.
type secretDoc struct {
	ID    string `bson:"_id"`
	Value []byte `bson:"value"`
}

// Secret implements store.Store.
func (s *Store) Secret(ctx context.Context, key string) ([]byte, error) {
	var d secretDoc
	err := s.db.Collection(secretsColl).FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", key, err)
	}
	return d.Value, nil
}

// SwapSecret implements store.Store, with conditional writes on the value.
// Swaps in this process are serialised too: FerretDB's conditional replace
// is not atomic.
func (s *Store) SwapSecret(ctx context.Context, key string, old, new []byte) error {
	defer s.lock("secret", key)()
	c := s.db.Collection(secretsColl)
	if old == nil {
		if new == nil {
			return fmt.Errorf("secret %s: nothing to swap", key)
		}
		_, err := c.InsertOne(ctx, secretDoc{ID: key, Value: new})
		if mongo.IsDuplicateKeyError(err) {
			return fmt.Errorf("secret %s: %w", key, store.ErrExists)
		}
		return err
	}
	match := bson.D{{Key: "_id", Value: key}, {Key: "value", Value: old}}
	var n int64
	if new == nil {
		res, err := c.DeleteOne(ctx, match)
		if err != nil {
			return fmt.Errorf("secret %s: %w", key, err)
		}
		n = res.DeletedCount
	} else {
		res, err := c.ReplaceOne(ctx, match, secretDoc{ID: key, Value: new})
		if err != nil {
			return fmt.Errorf("secret %s: %w", key, err)
		}
		n = res.MatchedCount
	}
	if n == 1 {
		return nil
	}
	if _, err := s.Secret(ctx, key); err != nil {
		return err // store.ErrNotFound when there is none
	}
	return fmt.Errorf("secret %s: %w", key, store.ErrConflict)
}

// upsert runs an upsert by _id, and once more if it lost a race: two
// upserts of a new key at once can both try to insert, and the loser gets
// a duplicate key (MongoDB retries that itself since 4.2, FerretDB does
// not). The key exists now, so the second try updates it.
func upsert(f func() error) error {
	err := f()
	if mongo.IsDuplicateKeyError(err) {
		err = f()
	}
	return err
}

// SetSecret implements store.Store.
func (s *Store) SetSecret(ctx context.Context, key string, value []byte) error {
	c := s.db.Collection(secretsColl)
	var err error
	if value == nil {
		_, err = c.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	} else {
		err = upsert(func() error {
			_, err := c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, secretDoc{ID: key, Value: value}, options.Replace().SetUpsert(true))
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", key, err)
	}
	return nil
}
