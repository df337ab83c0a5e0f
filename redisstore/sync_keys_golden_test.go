package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// goldenSyncKeys are the Redis keys one push of the two-layer store
// (sync_interval) writes after one Take of every algorithm it takes (see
// TestSyncKeysGolden), byte for byte: like goldenKeys, a running fleet's
// counts.
var goldenSyncKeys = []string{
	"rl:golden-fixed_window-1:{a%7Bb%7D%20c%0A%25}:sy:9356f3a5:0:29539440",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:sy:a9a7ca22:0:29539440",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:sy:a9a7ca22:1:492324",
	"rl:golden-sliding_window-1:{a%7Bb%7D%20c%0A%25}:sy:9abeab91:0:29539440",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:sy:ea50a41d:0:29539440",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:sy:ea50a41d:1:492324",
}

// TestSyncKeysGolden takes once with the two-layer store of every counter
// algorithm, with one and two tiers, a key_prefix and a key that needs
// escaping, pushes to a real Redis, and compares the set of keys written
// with goldenSyncKeys.
func TestSyncKeysGolden(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	one := []algorithms.Tier{{Events: 10, Window: time.Minute}}
	two := []algorithms.Tier{{Events: 10, Window: time.Minute}, {Events: 100, Window: time.Hour}}
	now := func() time.Time { return t0 }
	for _, alg := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		for n, ts := range [][]algorithms.Tier{one, two} {
			l := mustLimiter(t, alg, algorithms.Config{Tiers: ts})
			o := Options{KeyPrefix: "rl:", Zone: fmt.Sprintf("golden-%s-%d", alg, n+1)}
			// An interval longer than the test: the test pushes.
			s, err := NewSyncStore(c, l, o, SyncOptions{Interval: time.Hour, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d, err := s.Take(ctx, "a{b} c\n%", t0, 1)
			if err != nil || !d.Allowed {
				t.Fatalf("%s: Take: %+v, %v", alg, d, err)
			}
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkKeys(t, c, "goldenSyncKeys", goldenSyncKeys)
}

// checkKeys compares the keys in c with want, byte for byte, and lists
// those written when they differ.
func checkKeys(t *testing.T, c redis.UniversalClient, name string, want []string) {
	t.Helper()
	ctx := context.Background()
	var got []string
	iter := c.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		got = append(got, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		var b strings.Builder
		for _, k := range got {
			fmt.Fprintf(&b, "\t%q,\n", k)
		}
		t.Fatalf("keys written differ from %s; got:\n%s", name, b.String())
	}
}
