package redisstore

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// goldenSyncKeys are the Redis keys one push of the two-layer store
// (sync_interval) writes after one Take of every algorithm it takes (see
// TestSyncKeysGolden), byte for byte: like goldenKeys, a running fleet's
// counts.
//
// Changed on purpose once: the tiers left the config digest, so that a
// count survives a change of its tier's events (a changed window counts
// in windows of another number).
var goldenSyncKeys = []string{
	"rl:golden-fixed_window-1:{a%7Bb%7D%20c%0A%25}:sy:7cbb4a29:0:29539440",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:sy:7cbb4a29:0:29539440",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:sy:7cbb4a29:1:492324",
	"rl:golden-sliding_window-1:{a%7Bb%7D%20c%0A%25}:sy:c32fa43f:0:29539440",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:sy:c32fa43f:0:29539440",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:sy:c32fa43f:1:492324",
}

// TestSyncKeysGolden takes once with the two-layer store of every Summable
// algorithm, with one and two tiers, a key_prefix and a key that needs
// escaping, pushes to a real Redis, and compares the set of keys written
// with goldenSyncKeys.
func TestSyncKeysGolden(t *testing.T) {
	now := func() time.Time { return t0 }
	var algs []string
	for _, a := range algorithms.Names {
		if ok, _ := algorithms.Summable(a); ok {
			algs = append(algs, a)
		}
	}
	sort.Strings(algs)
	checkGolden(t, algs, "goldenSyncKeys", goldenSyncKeys, func(ctx context.Context, c redis.UniversalClient, l algorithms.Limiter, o Options) (algorithms.Decision, error) {
		// An interval longer than the test: the test pushes.
		s, err := NewSyncStore(c, l, o, SyncOptions{Interval: time.Hour, Now: now})
		if err != nil {
			return algorithms.Decision{}, err
		}
		t.Cleanup(func() { s.Close() })
		d, err := s.Take(ctx, goldenKey, t0, 1)
		if err != nil {
			return d, err
		}
		return d, s.Sync(ctx)
	})
}
