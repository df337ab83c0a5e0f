package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest/conformance"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// The conformance suite (package conformance) against the Redis store: the
// Lua twins must decide as the Go algorithms do.

// conformanceTarget is the Redis store of c as the conformance suite's
// store under test.
func conformanceTarget(c redis.UniversalClient) conformance.Target {
	return conformance.Target{
		Name: "redis",
		New: func(t *testing.T, l algorithms.Limiter, zone string) store.Store {
			s := mustStore(t, c, l, zone)
			// The memory store keeps a key's latest instant until it is
			// swept; Redis until the key expires, in real time. A long
			// margin keeps a slow run (a loaded machine, -race) from
			// expiring a key mid-timeline.
			s.setMargin(time.Hour)
			return s
		},
	}
}

// diffDecision is conformance.Diff of a decision of the Redis store.
func diffDecision(want, got algorithms.Decision, exact bool) string {
	return conformance.Diff(want, got, exact, "redis")
}

func TestConformance(t *testing.T) {
	_, c := newClient(t)
	n := conformance.Run(t, conformanceTarget(c), 300)
	t.Logf("single redis-server: %d Takes and %d Undos compared", n.Takes, n.Undos)
}

// TestCluster plays the conformance suite against a 6-node Redis Cluster
// (3 masters, 3 replicas), then keys full of braces, newlines and length,
// which must never answer CROSSSLOT.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no cluster")
	}
	_, c := newClusterClient(t, 1)
	t.Run("conformance", func(t *testing.T) {
		n := conformance.Run(t, conformanceTarget(c), 120)
		t.Logf("cluster: %d Takes and %d Undos compared", n.Takes, n.Undos)
	})
	t.Run("no_crossslot", func(t *testing.T) {
		ctx := context.Background()
		keys := []string{"", "plain", "{", "}", "{}", "}{", "a{b}c", "{x}{y}", "line\nbreak\r\n", "x\ny{",
			strings.Repeat("{", 50), strings.Repeat("k", 129), strings.Repeat("}\n", 300), "\x00\xff%7B"}
		cfg := algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)},
			algorithms.Tier{Events: 9, Window: time.Minute})}
		for _, alg := range algorithms.Names {
			cfg := cfg
			if alg == algorithms.Concurrency {
				cfg.Tiers = cfg.Tiers[:1]
			}
			l := mustLimiter(t, alg, cfg)
			s := mustStore(t, c, l, "cross{slot}\n")
			for _, k := range keys {
				d, err := s.Take(ctx, k, time.Time{}, 1)
				if err != nil {
					t.Fatalf("%s: Take(%q): %v", alg, k, err)
				}
				if err := s.Undo(ctx, k, time.Time{}, 1, d); err != nil {
					t.Fatalf("%s: Undo(%q): %v", alg, k, err)
				}
				slot := int64(-1)
				for _, rk := range s.Keys(k) {
					n, err := c.ClusterKeySlot(ctx, rk).Result()
					if err != nil {
						t.Fatal(err)
					}
					if slot >= 0 && n != slot {
						t.Fatalf("%s: keys of %q in slots %d and %d", alg, k, slot, n)
					}
					slot = n
				}
			}
		}
	})
}

// TestConformanceHandwritten plays the suite's handwritten timelines.
func TestConformanceHandwritten(t *testing.T) {
	_, c := newClient(t)
	conformance.RunHandwritten(t, conformanceTarget(c))
}
