package redisstore

// The Redis-backed setup and the counting the tests of this package share.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
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

// newDownableClient starts a Redis that a test stops and restarts, and a
// client of it that fails at once while it is down (no retry, a short
// dial).
func newDownableClient(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// perAlgorithm starts a Redis and runs f with a client of it as a subtest
// per algorithm, named after it.
func perAlgorithm(t *testing.T, f func(t *testing.T, ctx context.Context, c *redis.Client, alg string)) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, alg := range algorithms.Names {
		t.Run(alg, func(t *testing.T) { f(t, ctx, c, alg) })
	}
}

// newClusterClient starts a Redis Cluster of 3 masters with replicas
// replicas each and returns a client that sees every master.
func newClusterClient(t testing.TB, replicas int) (*redistest.Cluster, *redis.ClusterClient) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, replicas)
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

// newClientStore starts a redis-server and returns a Client of it (with
// the direct Pipeliner NewClient makes for a single node), destroyed when
// the test ends, and a GCRA Store of zone, 10 per hour, through that
// Pipeliner.
func newClientStore(t *testing.T, zone string) (*Client, *Store) {
	t.Helper()
	srv := redistest.Start(t)
	c := NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}}, ClientOptions{})
	t.Cleanup(func() { c.Destruct() })
	return c, pipelinedStore(t, c, c.Pipeliner(), algorithms.GCRA, oneTier(10, time.Hour), zone)
}

// takeConcurrently runs take n times in each of goroutines goroutines and
// returns how many were admitted; an error fails the test.
func takeConcurrently(t *testing.T, goroutines, n int, take func(g, i int) (algorithms.Decision, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	inParallel(goroutines, func(g int) {
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
	})
	return admitted.Load()
}

// inParallel runs f(0) to f(n-1), each in a goroutine of its own, and
// waits for them all.
func inParallel(n int, f func(g int)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { f(g) })
	}
	wg.Wait()
}

// idleClient returns a client of a port nothing listens on, for what must
// never dial Redis.
func idleClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	return c
}

// oneTier is a config of one tier, events per w. A test that takes on
// Redis's clock (a zero now) and counts what remains limits per hour or
// more: a unit comes back every w/events, and a loaded machine can take
// seconds between two Takes.
func oneTier(events int64, w time.Duration) algorithms.Config {
	return algorithms.Config{Tiers: []algorithms.Tier{{Events: events, Window: w}}}
}

func mustLimiter(t testing.TB, name string, cfg algorithms.Config) algorithms.Limiter {
	t.Helper()
	l, err := algorithms.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newBenchServer(b *testing.B) string {
	_, c := newClient(b)
	return c.Options().Addr
}

// alignedAfter returns the first multiple of w (since the Unix epoch) after
// t.
func alignedAfter(t time.Time, w time.Duration) time.Time {
	us := w.Microseconds()
	return time.UnixMicro((t.UnixMicro()/us + 1) * us).UTC()
}

// newTestSync returns a SyncStore without its goroutine (the test calls
// Sync), closed when the test ends.
func newTestSync(t testing.TB, c redis.UniversalClient, name string, cfg algorithms.Config, interval time.Duration, clk *storetest.Clock, zone string) *SyncStore {
	t.Helper()
	l, err := algorithms.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: zone}, SyncOptions{Interval: interval, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// counterKey is the Redis key of tier i's counter of the window holding at.
func (s *SyncStore) counterKey(key string, i int, at time.Time) string {
	p := &s.tiers[i]
	return s.head + EscapeKey(key) + p.tail + strconv.FormatInt(algorithms.WindowIndex(at.UnixMicro(), p.window), 10)
}

func mustSync(t testing.TB, ctx context.Context, stores ...*SyncStore) {
	t.Helper()
	for _, s := range stores {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func redisInt(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

// commandStat returns one field of INFO commandstats (calls,
// usec_per_call, ...) by command name.
func commandStat(t testing.TB, c *redis.Client, field string) map[string]float64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %s: %v", name, err)
				}
				m[strings.TrimPrefix(name, "cmdstat_")] = x
			}
		}
	}
	return m
}

// commandStats returns INFO commandstats as command -> calls.
func commandStats(t testing.TB, c *redis.Client) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for name, n := range commandStat(t, c, "calls") {
		m[name] = int64(n)
	}
	return m
}

// scriptCalls returns how many EVALSHA and EVAL Redis ran, and every
// command it saw (INFO commandstats).
func scriptCalls(t testing.TB, c *redis.Client) (int64, map[string]int64) {
	t.Helper()
	m := commandStats(t, c)
	return m["evalsha"] + m["eval"], m
}

// countHook counts what a client sends: commands, round trips (a command
// or a pipeline), and commands sent in pipelines.
type countHook struct {
	redistest.NopHook
	cmds, trips, piped atomic.Int64
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		h.piped.Add(int64(len(cmds)))
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

// setMargin changes the TTL margin of the keys s writes: a long one keeps
// real time from expiring the keys of a replayed timeline.
func (s *Store) setMargin(d time.Duration) {
	s.static[0] = strconv.FormatInt(d.Milliseconds(), 10)
	s.encode()
}

// queued is how many calls wait for a batch.
func (p *Pipeliner) queued() int {
	if x := p.direct; x != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
		return len(x.queue)
	}
	return len(p.calls)
}

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

func tiers(ts ...algorithms.Tier) []algorithms.Tier { return ts }
