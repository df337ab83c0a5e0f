package redisstore

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// leaseConfigs: one config of every algorithm a lease takes, of e events
// per window w (buckets: burst e as well).
func leaseConfigs(e int64, w time.Duration) map[string]algorithms.Config {
	return map[string]algorithms.Config{
		algorithms.FixedWindow:   oneTier(e, w),
		algorithms.SlidingWindow: oneTier(e, w),
		algorithms.SlidingLog:    oneTier(e, w),
		algorithms.TokenBucket:   oneTier(e, w),
		algorithms.GCRA:          oneTier(e, w),
	}
}

// leaseStores returns n leasing stores of l on c, as n Caddy instances
// would have, without their goroutines (the test reaps), closed at the end.
func leaseStores(t testing.TB, c redis.UniversalClient, l algorithms.Limiter, zone string, n int, dur time.Duration, clk *storetest.Clock) []*LeaseStore {
	t.Helper()
	var out []*LeaseStore
	for range n {
		s, err := newLeaseStore(c, l, Options{KeyPrefix: "rltest:", Zone: zone}, LeaseOptions{Duration: dur, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// TestLeaseNeverOver: three instances lease one key at random instants;
// every unit any of them admitted, replayed in time order on the memory
// algorithm, is admitted there too: together they never admit more than
// one instance deciding alone would.
func TestLeaseNeverOver(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	cfgs := leaseConfigs(300, time.Second)
	two := algorithms.Config{Tiers: []algorithms.Tier{{Events: 300, Window: time.Second}, {Events: 1000, Window: 5 * time.Second}}}
	cfgs["fixed_window two tiers"] = two
	cfgs["sliding_log two tiers"] = two
	cfgs["token_bucket burst"] = algorithms.Config{Tiers: []algorithms.Tier{{Events: 300, Window: time.Second}}, Burst: 100}
	cfgs["gcra burst"] = algorithms.Config{Tiers: []algorithms.Tier{{Events: 300, Window: time.Second}}, Burst: 100}
	for name, cfg := range cfgs {
		alg, _, _ := strings.Cut(name, " ")
		t.Run(name, func(t *testing.T) {
			l := mustLimiter(t, alg, cfg)
			clk := storetest.NewClock(t0)
			stores := leaseStores(t, c, l, "never-"+strings.ReplaceAll(name, " ", "-"), 3, 100*time.Millisecond, clk)
			rng := rand.New(rand.NewSource(1))
			type use struct {
				at   time.Time
				cost int64
			}
			var uses []use
			leased := 0
			maxStep := 3000
			for i := 0; i < 6000; i++ {
				// Phases of demand below and above the rate, and
				// pauses longer than a lease: a bucket full when a
				// lease is taken and its units used at the end.
				if i%300 == 0 {
					maxStep = []int{1000, 3000, 8000, 12000}[rng.Intn(4)]
				}
				step := time.Duration(rng.Intn(maxStep)) * time.Microsecond
				if rng.Intn(200) == 0 {
					step = time.Duration(rng.Intn(400)) * time.Millisecond
				}
				clk.Add(step)
				now := clk.Now()
				s := stores[rng.Intn(len(stores))]
				cost := int64(1 + rng.Intn(2))
				d, err := s.Take(ctx, "k", now, cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					uses = append(uses, use{now, cost})
					if d.Token != 0 {
						leased++
					}
					if rng.Intn(50) == 0 {
						if err := s.Undo(ctx, "k", now, cost, d); err != nil {
							t.Fatal(err)
						}
						if d.Token != 0 {
							uses = uses[:len(uses)-1]
						}
					}
				}
				if rng.Intn(100) == 0 {
					if err := s.Reap(ctx, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			st := l.NewState()
			for j, u := range uses {
				if d := st.Take(u.at, u.cost); !d.Allowed {
					t.Fatalf("use %d of %d (cost %d at +%v) refused by the memory algorithm: over the limit", j, len(uses), u.cost, u.at.Sub(t0))
				}
			}
			if leased < len(uses)/5 {
				t.Fatalf("%d of %d admissions from a lease: the key never got hot", leased, len(uses))
			}
			t.Logf("%d admitted, %d from leases", len(uses), leased)
		})
	}
}

// TestLeaseConcurrent: three instances and 64 goroutines on one key, all
// within one window (one hour from t0): never more than the limit, at
// least the stated lower bound, and at most 0.05 script calls per request.
func TestLeaseConcurrent(t *testing.T) {
	const (
		events   = 5000
		requests = 64 * 188
		step     = 100 * time.Microsecond
	)
	srv := redistestStart(t)
	for name, cfg := range leaseConfigs(events, time.Hour) {
		t.Run(name, func(t *testing.T) {
			var calls redistest.ScriptCalls
			c := redis.NewClient(&redis.Options{Addr: srv, PoolSize: 64})
			defer c.Close()
			ctx := context.Background()
			loadLease(t, c)
			c.AddHook(&calls)
			l := mustLimiter(t, name, cfg)
			clk := storetest.NewClock(t0)
			stores := leaseStores(t, c, l, "conc-"+name, 3, time.Second, clk)
			// Request i*64+g of goroutine g at t0 + that many steps.
			got := takeConcurrently(t, 64, requests/64, func(g, i int) (algorithms.Decision, error) {
				n := i*64 + g
				return stores[n%3].Take(ctx, "k", t0.Add(time.Duration(n)*step), 1)
			})
			// The run spans 1.2s: a bucket refills 5000/h x 1.2s < 2
			// units in it.
			limit := int64(events)
			if name == algorithms.TokenBucket || name == algorithms.GCRA {
				limit += 2
			}
			perReq := float64(calls.Load()) / requests
			t.Logf("admitted %d of %d (limit %d), %d script calls: %.4f per request", got, requests, limit, calls.Load(), perReq)
			if got > limit {
				t.Fatalf("admitted %d > limit %d", got, limit)
			}
			if lower := int64(events * 95 / 100); got < lower {
				t.Fatalf("admitted %d < lower bound %d", got, lower)
			}
			if perReq > 0.05 {
				t.Fatalf("%.4f script calls per request on a hot key, want <= 0.05", perReq)
			}
		})
	}
}

// loadLease loads the leasing script, so that the calls counted are
// EVALSHA only (not the EVAL after a first NOSCRIPT).
func loadLease(t *testing.T, c *redis.Client) {
	if err := leaseScript.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
}

// redistestStart starts a redis-server and returns its address.
func redistestStart(t *testing.T) string {
	srv, _ := newClient(t)
	return srv.Addr
}

// TestLeaseCold: a key whose requests come further apart than a lease
// leases nothing: one script call per request, deciding as the memory
// algorithm does.
func TestLeaseCold(t *testing.T) {
	srv := redistestStart(t)
	ctx := context.Background()
	for name, cfg := range leaseConfigs(5, 10*time.Second) {
		t.Run(name, func(t *testing.T) {
			var calls redistest.ScriptCalls
			c := redis.NewClient(&redis.Options{Addr: srv})
			defer c.Close()
			loadLease(t, c)
			c.AddHook(&calls)
			l := mustLimiter(t, name, cfg)
			clk := storetest.NewClock(t0)
			s := leaseStores(t, c, l, "cold-"+name, 1, 100*time.Millisecond, clk)[0]
			st := l.NewState()
			for i := 0; i < 12; i++ {
				now := t0.Add(time.Duration(i) * 700 * time.Millisecond)
				clk.Set(now)
				want := st.Take(now, 1)
				got, err := s.Take(ctx, "k", now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
					t.Fatalf("take %d: allowed %v remaining %d, memory: %v %d", i, got.Allowed, got.Remaining, want.Allowed, want.Remaining)
				}
				if n := calls.Load(); n != int64(i+1) {
					t.Fatalf("take %d: %d script calls so far, want one per request", i, n)
				}
			}
		})
	}
}

// TestLeaseGiveBack: the units an instance leased and did not use go back
// to Redis when it closes (and when its lease sits idle), and another
// instance admits them.
func TestLeaseGiveBack(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for name, cfg := range leaseConfigs(100, time.Hour) {
		for _, how := range []string{"close", "idle"} {
			t.Run(name+"/"+how, func(t *testing.T) {
				l := mustLimiter(t, name, cfg)
				clk := storetest.NewClock(t0)
				st := leaseStores(t, c, l, "back-"+how+"-"+name, 2, time.Second, clk)
				a, b := st[0], st[1]
				for i := 0; i < 21; i++ {
					if d, err := a.Take(ctx, "k", t0, 1); err != nil || !d.Allowed {
						t.Fatalf("take %d: %+v %v", i, d, err)
					}
				}
				if held := a.held("k"); held == 0 {
					t.Fatal("a holds no lease after 21 takes")
				}
				switch how {
				case "close":
					if err := a.Close(); err != nil {
						t.Fatal(err)
					}
				case "idle":
					clk.Add(600 * time.Millisecond) // idle for half a lease
					if err := a.Reap(ctx, false); err != nil {
						t.Fatal(err)
					}
				}
				if held := a.held("k"); held != 0 {
					t.Fatalf("a still holds %d units", held)
				}
				now := clk.Now()
				n := 0
				for i := 0; i < 200; i++ {
					d, err := b.Take(ctx, "k", now, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						n++
					}
				}
				if n != 79 {
					t.Fatalf("b admitted %d after a gave back, want 79 (100 less a's 21)", n)
				}
			})
		}
	}
}

// held returns the units key's lease has left.
func (s *LeaseStore) held(key string) int64 {
	sh := s.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(key); e != nil {
		return e.Value.left
	}
	return 0
}

// TestLeaseRedisDown: a call that fails returns the error (the handler's
// breaker and on_error take it from there), while a lease still held
// serves locally without Redis.
func TestLeaseRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	// No retries: a refused connection fails at once.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	l := mustLimiter(t, algorithms.FixedWindow, oneTier(1000, time.Hour))
	clk := storetest.NewClock(t0)
	s := leaseStores(t, c, l, "down", 1, time.Second, clk)[0]
	for i := 0; i < 10; i++ {
		if _, err := s.Take(ctx, "hot", t0, 1); err != nil {
			t.Fatal(err)
		}
	}
	held := s.held("hot")
	if held == 0 {
		t.Fatal("no lease held")
	}
	srv.Stop()
	for i := int64(0); i < held; i++ {
		if d, err := s.Take(ctx, "hot", t0, 1); err != nil || !d.Allowed {
			t.Fatalf("local take %d of %d with Redis down: %+v %v", i, held, d, err)
		}
	}
	if _, err := s.Take(ctx, "hot", t0, 1); err == nil {
		t.Fatal("lease used up, Redis down: no error")
	}
	if _, err := s.Take(ctx, "cold", t0, 1); err == nil {
		t.Fatal("cold key, Redis down: no error")
	}
}

// TestLeaseRefused: the algorithms a lease cannot charge exactly, and
// count_rejected, are refused.
func TestLeaseRefused(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, name := range []string{algorithms.LeakyBucket, algorithms.Concurrency} {
		l := mustLimiter(t, name, oneTier(10, time.Second))
		if _, err := NewLeaseStore(c, l, Options{Zone: "z"}, LeaseOptions{Duration: time.Second}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg := oneTier(10, time.Second)
	cfg.CountRejected = true
	if _, err := NewLeaseStore(c, mustLimiter(t, algorithms.FixedWindow, cfg), Options{Zone: "z"}, LeaseOptions{Duration: time.Second}); err == nil {
		t.Error("count_rejected: no error")
	}
}

// goldenLeaseKeys are the Redis keys the leasing store writes for a key
// that became hot (state and instances hash), byte for byte: like
// goldenKeys, a running fleet's data.
var goldenLeaseKeys = []string{
	"rl:golden-fixed_window-1:{a%7Bb%7D%20c%0A%25}:ls:3998e740",
	"rl:golden-fixed_window-1:{a%7Bb%7D%20c%0A%25}:ls:3998e740:n",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:ls:6d2cb667",
	"rl:golden-fixed_window-2:{a%7Bb%7D%20c%0A%25}:ls:6d2cb667:n",
	"rl:golden-gcra-1:{a%7Bb%7D%20c%0A%25}:ls:5251da9b",
	"rl:golden-gcra-1:{a%7Bb%7D%20c%0A%25}:ls:5251da9b:n",
	"rl:golden-gcra-2:{a%7Bb%7D%20c%0A%25}:ls:ad33309f",
	"rl:golden-gcra-2:{a%7Bb%7D%20c%0A%25}:ls:ad33309f:n",
	"rl:golden-sliding_log-1:{a%7Bb%7D%20c%0A%25}:ls:44a7dba9",
	"rl:golden-sliding_log-1:{a%7Bb%7D%20c%0A%25}:ls:44a7dba9:n",
	"rl:golden-sliding_log-2:{a%7Bb%7D%20c%0A%25}:ls:005ac3cc",
	"rl:golden-sliding_log-2:{a%7Bb%7D%20c%0A%25}:ls:005ac3cc:n",
	"rl:golden-sliding_window-1:{a%7Bb%7D%20c%0A%25}:ls:36bee335",
	"rl:golden-sliding_window-1:{a%7Bb%7D%20c%0A%25}:ls:36bee335:n",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:ls:6853d2db",
	"rl:golden-sliding_window-2:{a%7Bb%7D%20c%0A%25}:ls:6853d2db:n",
	"rl:golden-token_bucket-1:{a%7Bb%7D%20c%0A%25}:ls:697ddd5e",
	"rl:golden-token_bucket-1:{a%7Bb%7D%20c%0A%25}:ls:697ddd5e:n",
	"rl:golden-token_bucket-2:{a%7Bb%7D%20c%0A%25}:ls:9a824cd9",
	"rl:golden-token_bucket-2:{a%7Bb%7D%20c%0A%25}:ls:9a824cd9:n",
}

// TestLeaseKeysGolden takes a few times at one instant with the leasing
// store of every algorithm it takes, one and two tiers, and compares the
// keys written with goldenLeaseKeys.
func TestLeaseKeysGolden(t *testing.T) {
	var algs []string
	for _, a := range algorithms.Names {
		if leases(a) {
			algs = append(algs, a)
		}
	}
	sort.Strings(algs)
	checkGolden(t, algs, "goldenLeaseKeys", goldenLeaseKeys, func(ctx context.Context, c redis.UniversalClient, l algorithms.Limiter, o Options) (d algorithms.Decision, err error) {
		s, err := newLeaseStore(c, l, o, LeaseOptions{Duration: time.Second})
		if err != nil {
			return d, err
		}
		for range 3 {
			if d, err = s.Take(ctx, "a{b} c\n%", t0, 1); err != nil || !d.Allowed {
				break
			}
		}
		return d, err
	})
}

// TestLeaseKeysHaveTTL: every key the leasing store writes (state and
// instances hash), for every algorithm, through leases, denials and
// give-backs, has a TTL of at most twice the window plus two leases and the
// margin.
func TestLeaseKeysHaveTTL(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const w, dur = time.Minute, time.Second
	for name, cfg := range leaseConfigs(50, w) {
		clk := storetest.NewClock(t0)
		stores := leaseStores(t, c, mustLimiter(t, name, cfg), "ttl-"+name, 3, dur, clk)
		for i := 0; i < 600; i++ {
			clk.Add(7 * time.Millisecond)
			s := stores[i%3]
			if _, err := s.Take(ctx, fmt.Sprintf("k%d", i%4), clk.Now(), 1); err != nil {
				t.Fatal(err)
			}
			if i%100 == 0 {
				if err := s.Reap(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, s := range stores {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if n := assertTTLs(t, c, "rltest:ttl-"+name+":*", 2*w+2*dur+Margin); n == 0 {
			t.Fatalf("%s: no key written", name)
		}
	}
}

// TestLeaseCluster: leasing on a Redis Cluster (the state and the
// instances hash share the key's slot): three instances on many keys admit
// exactly the limit of each.
func TestLeaseCluster(t *testing.T) {
	_, c := newClusterClient(t, 1)
	ctx := context.Background()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 30, Window: time.Hour}, {Events: 100, Window: 2 * time.Hour}}}
	clk := storetest.NewClock(t0)
	stores := leaseStores(t, c, mustLimiter(t, algorithms.SlidingLog, cfg), "cluster", 3, time.Second, clk)
	const keys = 20
	admitted := make([]int, keys)
	for i := 0; i < keys*60; i++ {
		k := i % keys
		d, err := stores[(i/keys)%3].Take(ctx, fmt.Sprintf("k%d", k), t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted[k]++
		}
	}
	for k, n := range admitted {
		if n != 30 {
			t.Errorf("key %d: %d admitted, want 30", k, n)
		}
	}
}

// TestLeaseStranded measures the worst case of under-admission: three
// instances get hot on a key, then two go quiet holding their leases. The
// third is refused once the rest is used: what is missing is exactly what
// the quiet two hold, within the stated bound (less than 1 - 1/2 x 3/4 x 5/6
// of what was left), and it comes back once their leases are given back.
func TestLeaseStranded(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const events = 1000
	for name, cfg := range leaseConfigs(events, time.Hour) {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(t0)
			st := leaseStores(t, c, mustLimiter(t, name, cfg), "stranded-"+name, 3, time.Second, clk)
			takeAll := func(s *LeaseStore, n int) int {
				got := 0
				for i := 0; i < n; i++ {
					d, err := s.Take(ctx, "k", clk.Now(), 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						got++
					}
				}
				return got
			}
			used := 0
			for round := 0; round < 40; round++ {
				for _, s := range st {
					used += takeAll(s, 1)
				}
			}
			quiet := st[0].held("k") + st[1].held("k")
			used += takeAll(st[2], 2*events)
			stranded := events - used
			bound := events - events*1*3*5/(2*4*6) // 1 - 1/2 x 3/4 x 5/6 of it
			t.Logf("quiet instances hold %d units: %d admitted, %d stranded (bound %d)", quiet, used, stranded, bound)
			if int64(stranded) != quiet || stranded > bound {
				t.Fatalf("%d stranded, the quiet instances hold %d (bound %d)", stranded, quiet, bound)
			}
			// After a lease duration the quiet leases are given back
			// (idle), and the third instance's denial has run out.
			clk.Add(1100 * time.Millisecond)
			for _, s := range st[:2] {
				if err := s.Reap(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
			back := takeAll(st[2], 2*events)
			if name == algorithms.TokenBucket || name == algorithms.GCRA {
				// A bucket takes nothing back after the lease's end
				// (LEASE.md); 1.1s refills no unit of 1000/h.
				if back != 0 {
					t.Fatalf("%d admitted after the leases ended", back)
				}
				return
			}
			if back != stranded {
				t.Fatalf("%d admitted after the give-back, want the %d stranded", back, stranded)
			}
		})
	}
}

// TestLeaseTakeHeld: without Redis, TakeHeld admits exactly the units a
// key's lease holds, and not one more, until the lease ends; it refuses a
// key Redis denied until the denial's Retry-After, beyond the lease
// duration after which Take would ask Redis again; it knows nothing of
// other keys.
func TestLeaseTakeHeld(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	const dur = time.Second
	type store struct {
		s   *LeaseStore
		clk *storetest.Clock
	}
	stores := map[string]store{}
	for name, cfg := range leaseConfigs(100, time.Hour) {
		clk := storetest.NewClock(t0)
		s := leaseStores(t, c, mustLimiter(t, name, cfg), "held-"+name, 1, dur, clk)[0]
		for i := 0; i < 10; i++ {
			if d, err := s.Take(ctx, "hot", t0, 1); err != nil || !d.Allowed {
				t.Fatalf("%s: take %d: %+v %v", name, i, d, err)
			}
		}
		// Redis refuses a request of the whole limit: denied for a while
		// (a bucket: until it refills; a window: until the hour ends).
		if d, err := s.Take(ctx, "full", t0, 100); err != nil || !d.Allowed {
			t.Fatalf("%s: the whole limit at once: %+v %v", name, d, err)
		}
		if d, err := s.Take(ctx, "full", t0, 100); err != nil || d.Allowed || d.RetryAfter <= 10*dur {
			t.Fatalf("%s: a second whole limit: %+v %v, want a denial longer than ten leases", name, d, err)
		}
		stores[name] = store{s, clk}
	}
	srv.Stop()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			s := st.s
			held := s.held("hot")
			if held == 0 {
				t.Fatal("no lease held after 10 takes")
			}
			now := t0.Add(dur / 2)
			for i := int64(0); i < held; i++ {
				if d, ok := s.TakeHeld("hot", now, 1); !ok || !d.Allowed {
					t.Fatalf("held take %d of %d: %+v, %v", i, held, d, ok)
				}
			}
			if d, ok := s.TakeHeld("hot", now, 1); ok {
				t.Fatalf("take %d of a lease of %d: %+v, want no answer", held+1, held, d)
			}
			if _, ok := s.TakeHeld("cold", now, 1); ok {
				t.Fatal("a key without a lease answered")
			}

			// Past the lease duration Take asks Redis again; TakeHeld
			// still refuses, until the Retry-After.
			d, _ := s.Take(ctx, "full", t0, 100) // the denial, from the entry
			after := t0.Add(2 * dur)
			if _, err := s.Take(ctx, "full", after, 100); err == nil {
				t.Fatal("Take past a lease duration, Redis down: no error")
			}
			if got, ok := s.TakeHeld("full", after, 100); !ok || got.Allowed || got.RetryAfter != d.RetryAfter-2*dur {
				t.Fatalf("TakeHeld two leases after the denial: %+v, %v; want a denial for %s", got, ok, d.RetryAfter-2*dur)
			}
			// Idle for more than two leases, the key is kept while its
			// denial holds.
			idle := t0.Add(5 * dur)
			st.clk.Set(idle)
			if err := s.Reap(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got, ok := s.TakeHeld("full", idle, 100); !ok || got.Allowed {
				t.Fatalf("TakeHeld after a reap, idle for five leases: %+v, %v; want the denial", got, ok)
			}
			if _, ok := s.TakeHeld("full", t0.Add(d.RetryAfter), 100); ok {
				t.Fatal("TakeHeld refused at the denial's Retry-After")
			}
		})
	}
}
