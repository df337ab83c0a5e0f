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

// goldenKeys are the Redis keys one Take of every algorithm writes (see
// TestKeysGolden), byte for byte. Key names are a running fleet's data: a
// change here means every instance of the new version starts from fresh
// counts while old ones still run, and must be deliberate (a new layout
// letter, see script.layout) and noted in README.md's upgrade notes.
//
// Changed on purpose once: the limits (tiers and burst) left the config
// digest, so that a key's state survives a limit change (the scripts
// convert it), and the buckets' and gcra's state took layout "p" (the
// constants each tier was saved under). Every algorithm's names changed
// with it; they no longer depend on the limits (one and two tiers share
// a digest).
var goldenKeys = []string{
	"rl:golden-concurrency-1:{a%7Bb%7D%20c%0A%25}:cc:e1fa8add",
	"rl:golden-concurrency-1:{a%7Bb%7D%20c%0A%25}:cc:e1fa8add:l",
	"rl:golden-fixed_window-1:{a%7Bb%7D%20c%0A%25}:fw:4fb4d113",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:fw:4fb4d113",
	"rl:golden-gcra-1:{a%7Bb%7D%20c%0A%25}:gcra:20b17689",
	"rl:golden-gcra-2:{a%7Bb%7D%20c%0A%25}:gcra:20b17689",
	"rl:golden-leaky_bucket-1:{a%7Bb%7D%20c%0A%25}:lb:18c79174",
	"rl:golden-leaky_bucket-2:{a%7Bb%7D%20c%0A%25}:lb:18c79174",
	"rl:golden-sliding_log-1:{a%7Bb%7D%20c%0A%25}:sl:5e7c201c:0",
	"rl:golden-sliding_log-1:{a%7Bb%7D%20c%0A%25}:sl:5e7c201c:m",
	"rl:golden-sliding_log-2:{a%7Bb%7D%20c%0A%25}:sl:5e7c201c:0",
	"rl:golden-sliding_log-2:{a%7Bb%7D%20c%0A%25}:sl:5e7c201c:1",
	"rl:golden-sliding_log-2:{a%7Bb%7D%20c%0A%25}:sl:5e7c201c:m",
	"rl:golden-sliding_window-1:{a%7Bb%7D%20c%0A%25}:sw:e7e12138",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:sw:e7e12138",
	"rl:golden-token_bucket-1:{a%7Bb%7D%20c%0A%25}:tb:e1bb8297",
	"rl:golden-token_bucket-2:{a%7Bb%7D%20c%0A%25}:tb:e1bb8297",
}

// TestKeysGolden runs one admitted Take of every algorithm, with one and
// (where the algorithm takes them) two tiers, a key_prefix and a key that
// needs escaping, against a real Redis, and compares the set of keys
// written with goldenKeys.
func TestKeysGolden(t *testing.T) {
	checkGolden(t, algorithms.Names, "goldenKeys", goldenKeys, func(ctx context.Context, c redis.UniversalClient, l algorithms.Limiter, o Options) (algorithms.Decision, error) {
		s, err := NewStore(c, l, o)
		if err != nil {
			return algorithms.Decision{}, err
		}
		s.setMargin(time.Hour) // the timeline's instant is not the wall clock
		return s.Take(ctx, goldenKey, t0, 1)
	})
}

// goldenTiers are the tier lists of the golden tests: one tier, then two.
func goldenTiers() [][]algorithms.Tier {
	return [][]algorithms.Tier{
		{{Events: 10, Window: time.Minute}},
		{{Events: 10, Window: time.Minute}, {Events: 100, Window: time.Hour}},
	}
}

// goldenOptions names the zone of the golden tests' store of alg with the
// n-th (from 0) of goldenTiers.
func goldenOptions(alg string, n int) Options {
	return Options{KeyPrefix: "rl:", Zone: fmt.Sprintf("golden-%s-%d", alg, n+1)}
}

// goldenKey is the key of the golden tests: every character that needs
// escaping.
const goldenKey = "a{b} c\n%"

// checkGolden starts a Redis, takes goldenKey once with the store take
// opens for every algorithm of algs and tier list of goldenTiers (one tier
// only for concurrency), and compares the keys written with want, byte for
// byte; name is want's variable, named when they differ.
func checkGolden(t *testing.T, algs []string, name string, want []string, take func(ctx context.Context, c redis.UniversalClient, l algorithms.Limiter, o Options) (algorithms.Decision, error)) {
	t.Helper()
	_, c := newClient(t)
	ctx := context.Background()
	for _, alg := range algs {
		for n, ts := range goldenTiers() {
			if alg == algorithms.Concurrency && len(ts) > 1 {
				continue
			}
			d, err := take(ctx, c, mustLimiter(t, alg, algorithms.Config{Tiers: ts}), goldenOptions(alg, n))
			if err != nil || !d.Allowed {
				t.Fatalf("%s: Take: %+v, %v", alg, d, err)
			}
		}
	}
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
