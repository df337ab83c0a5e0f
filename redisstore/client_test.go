package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// On a Cluster, the probe writes on every master: one that refuses the
// scripts keeps the breaker open even while the others accept them.
func TestBreakerProbeEveryClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const prefix = "rl:"
	c := NewClient(&redis.UniversalOptions{Addrs: cl.Addrs, DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second},
		ClientOptions{KeyPrefix: prefix})
	defer c.Destruct()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Probe(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe of a healthy Cluster: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	masters, keys := probeKeys(prefix, slots)
	if len(masters) != 3 || len(keys) != 3 {
		t.Fatalf("probe keys %v on masters %v, want one on each of the 3", keys, masters)
	}
	for i, k := range keys {
		m, err := c.UniversalClient.(*redis.ClusterClient).MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != masters[i] {
			t.Errorf("probe key %s is on %s, want %s", k, m.Options().Addr, masters[i])
		}
		if ttl := m.PTTL(ctx, k).Val(); ttl <= 0 || ttl > probeKeyTTL*time.Millisecond {
			t.Errorf("probe key %s: TTL %v", k, ttl)
		}
	}

	// One master (not the first: a probe of one key would likely miss it)
	// full.
	full := masters[len(masters)-1]
	redistest.Fill(t, full, keys[len(keys)-1][strings.IndexByte(keys[len(keys)-1], '{'):])
	err = c.Probe(ctx)
	if err == nil || !strings.Contains(err.Error(), "OOM") || !strings.Contains(err.Error(), full) {
		t.Fatalf("probe with master %s full: %v, want its OOM", full, err)
	}
	if _, err := redistest.Do(full, "CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("probe once fixed: %v", err)
	}
}
