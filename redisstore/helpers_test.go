package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// t0 is the start of every timeline: an odd instant, not aligned to any
// window.
var t0 = time.Date(2026, 3, 1, 12, 0, 7, 123456000, time.UTC)

// newClient starts a redis-server and returns a client for it.
func newClient(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// newClusterClient starts a 6-node Redis Cluster and returns a client.
func newClusterClient(t testing.TB) (*redistest.Cluster, *redis.ClusterClient) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Wait until the client sees the full slot map.
	for {
		if err := c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error {
			return s.Ping(ctx).Err()
		}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("cluster client never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cl, c
}

// limiter builds a Limiter or reports why the algorithm cannot take cfg.
func limiter(name string, cfg algorithms.Config) (algorithms.Limiter, error) {
	return algorithms.New(name, cfg)
}

func mustStore(t testing.TB, c redis.UniversalClient, l algorithms.Limiter, zone string) *Store {
	t.Helper()
	s, err := NewStore(c, l, Options{KeyPrefix: "rltest:", Zone: zone})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// implemented reports whether the Go twin of name is implemented yet (the
// algorithms are written in parallel; a stub answers "not implemented").
func implemented(name string) bool {
	_, err := algorithms.New(name, algorithms.Config{Tiers: []algorithms.Tier{{Events: 1, Window: time.Second}}})
	_, ok := scripts[name]
	return err == nil && ok
}

// takeConcurrently runs take n times in each of goroutines goroutines and
// returns how many were admitted; an error fails the test.
func takeConcurrently(t *testing.T, goroutines, n int, take func(g, i int) (algorithms.Decision, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				d, err := take(g, i)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load()
}
