package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

func TestNewStoreErrors(t *testing.T) {
	c := idleClient(t)
	l := mustLimiter(t, algorithms.SlidingLog, oneTier(1, time.Second))
	if _, err := NewStore(c, l, Options{KeyPrefix: "rl{"}); err == nil || !strings.Contains(err.Error(), "brace") {
		t.Fatalf("brace in key_prefix: %v", err)
	}
	if _, err := NewStore(nil, l, Options{}); err == nil {
		t.Fatal("nil client accepted")
	}
	if _, err := NewStore(c, nil, Options{}); err == nil {
		t.Fatal("nil limiter accepted")
	}
}

func TestKeysOneHashTag(t *testing.T) {
	c := idleClient(t)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: time.Second}, {Events: 5, Window: 10 * time.Second}}}
	for _, name := range algorithms.Names {
		cfg := cfg
		if name == algorithms.Concurrency {
			cfg.Tiers = cfg.Tiers[:1]
		}
		s := mustStore(t, c, mustLimiter(t, name, cfg), "z{o}ne\n")
		for _, key := range []string{"", "a", "{", "}", "a{b}c", "x\ny", strings.Repeat("{", 200)} {
			keys := s.Keys(key)
			tag := hashTag(keys[0])
			for _, k := range keys {
				if strings.ContainsAny(k, "\n\r") {
					t.Errorf("%s: key %q contains a newline", name, k)
				}
				if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
					t.Errorf("%s: key %q has not exactly one brace pair", name, k)
				}
				if hashTag(k) != tag {
					t.Errorf("%s: keys %q and %q have different hash tags", name, keys[0], k)
				}
				if len(k) > 200 {
					t.Errorf("%s: key %q is %d bytes", name, k, len(k))
				}
			}
		}
	}
}

// hashTag is what Redis Cluster hashes: the text between the first '{' and
// the first '}' after it, when not empty; else the whole key.
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return k
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return k
	}
	return k[i+1 : i+1+j]
}

// TestUniqueMembers: 1000 Takes in one microsecond are 1000 members, for
// sliding_log (units) and concurrency (leases), from one store and from
// several stores (instances) at once.
func TestUniqueMembers(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, name := range []string{algorithms.SlidingLog, algorithms.Concurrency} {
		t.Run(name, func(t *testing.T) {
			l := mustLimiter(t, name, oneTier(1000, time.Minute))
			stores := []*Store{mustStore(t, c, l, "uniq-"+name), mustStore(t, c, l, "uniq-"+name), mustStore(t, c, l, "uniq-"+name)}
			admitted := takeConcurrently(t, 8, 1100/8+1, func(g, i int) (algorithms.Decision, error) {
				return stores[(g+i)%3].Take(ctx, "same", t0, 1)
			})
			if n := admitted; n != 1000 {
				t.Fatalf("admitted %d in one microsecond, want 1000", n)
			}
			zkey := stores[0].Keys("same")[1]
			if n := c.ZCard(ctx, zkey).Val(); n != 1000 {
				t.Fatalf("ZCARD %s = %d, want 1000", zkey, n)
			}
		})
	}
}

// TestExactAcrossInstances: three stores with their own clients share one
// Redis and one key; 64 goroutines take concurrently with Redis TIME;
// exactly the limit is admitted.
func TestExactAcrossInstances(t *testing.T) {
	srv, _ := newClient(t)
	ctx := context.Background()
	for _, name := range []string{algorithms.SlidingLog, algorithms.FixedWindow, algorithms.TokenBucket, algorithms.GCRA, algorithms.SlidingWindow, algorithms.LeakyBucket} {
		t.Run(name, func(t *testing.T) {
			// 100 per hour: the buckets refill one unit every 36 s, so
			// a slow run on a loaded machine admits no more than 100.
			cfg := oneTier(100, time.Hour)
			begin := time.Now()
			l := mustLimiter(t, name, cfg)
			zone := fmt.Sprintf("exact-%s-%d", name, time.Now().UnixNano())
			var stores []*Store
			for i := 0; i < 3; i++ {
				ci := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
				t.Cleanup(func() { ci.Close() })
				stores = append(stores, mustStore(t, ci, l, zone))
			}
			got := takeConcurrently(t, 64, 4, func(g, _ int) (algorithms.Decision, error) {
				return stores[g%3].Take(ctx, "shared", time.Time{}, 1)
			})
			// leaky_bucket and token_bucket refill/leak while the test
			// runs (10 per second): allow what can have come back.
			if got > 100 && begin.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
				t.Skipf("%d admitted, but an hour boundary passed during the test (windows are aligned to it)", got)
			}
			if elapsed := time.Since(begin); got > 100 && elapsed > 30*time.Second {
				t.Skipf("%d admitted, but the test took %v (a unit refills every 36s)", got, elapsed)
			}
			if got != 100 {
				t.Fatalf("%d admitted, want 100", got)
			}
		})
	}
}

// TestRedisTime: a zero now makes the script read Redis TIME. The window is
// a day, so that the four Takes fall in one fixed window (aligned to the
// window's length) unless the test runs across midnight UTC.
func TestRedisTime(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const window = 24 * time.Hour
	for _, name := range algorithms.Names {
		l := mustLimiter(t, name, oneTier(3, window))
		s := mustStore(t, c, l, "time-"+name)
		for i := 0; i < 4; i++ {
			d, err := s.Take(ctx, "k", time.Time{}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != (i < 3) {
				t.Fatalf("%s: take %d: %+v", name, i, d)
			}
			// sliding_window may wait into the next window: up to 2W.
			if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 2*window) {
				t.Fatalf("%s: retry after %v", name, d.RetryAfter)
			}
		}
		// The state holds Redis's clock: "last" is within a minute of ours.
		// It is the first integer of a string state, field t of a hash.
		keys := s.Keys("k")
		var last string
		if scripts[name].layout != "" {
			last, _, _ = strings.Cut(c.Get(ctx, keys[0]).Val(), " ")
		} else {
			last = c.HGet(ctx, keys[0], "t").Val()
		}
		us, err := strconv.ParseInt(last, 10, 64)
		if err != nil {
			t.Fatalf("%s: last %q: %v", name, last, err)
		}
		if d := time.Since(time.UnixMicro(us)); d < -time.Minute || d > time.Minute {
			t.Fatalf("%s: last instant %v is %v from now", name, time.UnixMicro(us), d)
		}
	}
}

// TestTTL: after timelines of every algorithm (passed-in times and Redis
// TIME), every key has a TTL, no longer than the state needs plus the
// margin: the longest window (twice for sliding_window, whose previous
// window counts for one more window; twice the bucket's refill time for the
// buckets and gcra, whose count_rejected debt may reach twice the capacity).
func TestTTL(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	cfgs := []algorithms.Config{
		{Tiers: []algorithms.Tier{{Events: 3, Window: 2 * time.Second}, {Events: 5, Window: 20 * time.Second}}},
		{CountRejected: true, Tiers: []algorithms.Tier{{Events: 3, Window: 2 * time.Second}, {Events: 5, Window: 20 * time.Second}}},
		{Burst: 4, CountRejected: true, Tiers: []algorithms.Tier{{Events: 2, Window: 3 * time.Second}}},
		oneTier(2, 5*time.Second),
	}
	for _, name := range algorithms.Names {
		for ci, cfg := range cfgs {
			l, err := algorithms.New(name, cfg)
			if err != nil {
				continue
			}
			var maxW time.Duration
			for _, tr := range cfg.Tiers {
				bound := tr.Window
				switch name {
				case algorithms.SlidingWindow:
					bound = 2 * tr.Window
				case algorithms.TokenBucket, algorithms.LeakyBucket, algorithms.GCRA:
					burst := cfg.Burst
					if burst == 0 {
						burst = tr.Events
					}
					bound = 2 * time.Duration(burst) * (tr.Window/time.Duration(tr.Events) + time.Microsecond)
				}
				maxW = max(maxW, bound)
			}
			s := mustStore(t, c, l, fmt.Sprintf("ttl-%s-%d", name, ci))
			for i := 0; i < 40; i++ {
				now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
				if i%2 == 1 {
					now = time.Time{}
				}
				key := fmt.Sprintf("k%d", i%3)
				d, err := s.Take(ctx, key, now, int64(1+i%2))
				if err != nil {
					t.Fatal(err)
				}
				if i%5 == 0 {
					if err := s.Undo(ctx, key, now, int64(1+i%2), d); err != nil {
						t.Fatal(err)
					}
				}
			}
			n := 0
			iter := c.Scan(ctx, 0, fmt.Sprintf("rltest:ttl-%s-%d:*", name, ci), 100).Iterator()
			for iter.Next(ctx) {
				k := iter.Val()
				n++
				ttl := c.PTTL(ctx, k).Val()
				if ttl == -2 { // expired since the SCAN: fine
					continue
				}
				if ttl <= 0 || ttl > maxW+Margin+time.Millisecond {
					t.Errorf("%s cfg %d: key %q has PTTL %v, want in (0, %v]", name, ci, k, ttl, maxW+Margin)
				}
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Errorf("%s cfg %d: no keys written", name, ci)
			}
		}
	}
	// And no key anywhere without a TTL.
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if ttl := c.PTTL(ctx, iter.Val()).Val(); ttl <= 0 && ttl != -2 {
			t.Errorf("key %q has no TTL (%v)", iter.Val(), ttl)
		}
	}
}

// TestNoScript: after SCRIPT FLUSH and after a Redis restart, Take falls
// back from EVALSHA to EVAL and works.
func TestNoScript(t *testing.T) {
	srv, c := newClient(t)
	ctx := context.Background()
	l := mustLimiter(t, algorithms.TokenBucket, oneTier(2, time.Minute))
	s := mustStore(t, c, l, "noscript")
	take := func(want bool) {
		t.Helper()
		d, err := s.Take(ctx, "k", t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("allowed %v, want %v", d.Allowed, want)
		}
	}
	take(true)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	take(true)
	take(false)
	if ok := c.ScriptExists(ctx, s.script.run.Hash()).Val(); len(ok) != 1 || !ok[0] {
		t.Fatal("the script was not loaded again by EVAL")
	}
	srv.Restart() // empty dataset, empty script cache
	// The pool's connections died with the server: go-redis retries.
	var err error
	for i := 0; i < 3; i++ {
		if _, err = s.Take(ctx, "k", t0, 1); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Take after restart: %v", err)
	}
	take(true) // the second of 2 on a fresh state
	take(false)
}

// scriptInner are the commands the scripts run inside Redis.
var scriptInner = map[string]bool{
	"time": true, "get": true, "mget": true, "set": true, "del": true, "exists": true,
	"hmget": true, "hset": true, "pexpire": true,
	"zadd": true, "zcard": true, "zrange": true, "zrangebyscore": true,
	"zrem": true, "zremrangebyscore": true, "zremrangebyrank": true,
}

// TestOneCommandPerTake: in the steady state a Take is exactly one EVALSHA
// (and an Undo one more), whatever the algorithm and the number of tiers.
func TestOneCommandPerTake(t *testing.T) {
	srv, c := newClient(t)
	sc := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	defer sc.Close()
	hook := &countHook{}
	sc.AddHook(hook)
	ctx := context.Background()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 30, Window: time.Second}, {Events: 50, Window: 10 * time.Second}}}
	for _, name := range algorithms.Names {
		cfg := cfg
		if name == algorithms.Concurrency {
			cfg.Tiers = cfg.Tiers[:1]
		}
		s := mustStore(t, sc, mustLimiter(t, name, cfg), "cmds-"+name)
		if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil { // loads the script
			t.Fatal(err)
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hook.cmds.Store(0)
		const n = 50
		undos := 0
		for i := 0; i < n; i++ {
			now := time.Time{}
			if i%2 == 0 {
				now = t0.Add(time.Duration(i) * time.Millisecond)
			}
			d, err := s.Take(ctx, fmt.Sprintf("k%d", i%4), now, 1)
			if err != nil {
				t.Fatal(err)
			}
			if i%10 == 0 && d.Allowed {
				if err := s.Undo(ctx, fmt.Sprintf("k%d", i%4), now, 1, d); err != nil {
					t.Fatal(err)
				}
				undos++
			}
		}
		stats := commandStats(t, c)
		if stats["evalsha"] != int64(n+undos) {
			t.Errorf("%s: %d EVALSHA for %d Takes and %d Undos", name, stats["evalsha"], n, undos)
		}
		// INFO commandstats also counts the commands a script runs inside
		// Redis; what the client sent is counted by the hook.
		for cmd, calls := range stats {
			if !scriptInner[cmd] && cmd != "evalsha" && cmd != "config|resetstat" && cmd != "info" {
				t.Errorf("%s: unexpected command %s (%d calls)", name, cmd, calls)
			}
		}
		if sent := hook.cmds.Swap(0); sent != int64(n+undos) {
			t.Errorf("%s: the client sent %d commands for %d Takes and %d Undos", name, sent, n, undos)
		}
		info := c.Info(ctx, "commandstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") {
				t.Logf("%s: %s (inside Redis: %v)", name, strings.TrimSpace(line), stats)
			}
		}
	}
}

// TestConcurrencyLeases: a lease is released by Undo and expires on its
// own after the window.
func TestConcurrencyLeases(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	l := mustLimiter(t, algorithms.Concurrency, oneTier(2, time.Second))
	s := mustStore(t, c, l, "leases")
	d1, _ := s.Take(ctx, "k", t0, 1)
	d2, _ := s.Take(ctx, "k", t0, 1)
	d3, _ := s.Take(ctx, "k", t0, 1)
	if !d1.Allowed || !d2.Allowed || d3.Allowed || d1.Token == d2.Token || d1.Token == 0 {
		t.Fatalf("%+v %+v %+v", d1, d2, d3)
	}
	if err := s.Undo(ctx, "k", t0, 1, d1); err != nil {
		t.Fatal(err)
	}
	if n := c.ZCard(ctx, s.Keys("k")[1]).Val(); n != 1 {
		t.Fatalf("%d leases after a release, want 1", n)
	}
	if d, _ := s.Take(ctx, "k", t0, 1); !d.Allowed {
		t.Fatalf("not admitted after a release: %+v", d)
	}
	// A crashed instance never releases: the leases expire after 1s.
	if d, _ := s.Take(ctx, "k", t0.Add(999*time.Millisecond), 1); d.Allowed {
		t.Fatalf("admitted before the leases expired: %+v", d)
	}
	if d, _ := s.Take(ctx, "k", t0.Add(time.Second), 2); !d.Allowed {
		t.Fatalf("not admitted after the leases expired: %+v", d)
	}
	// Releasing an expired lease is harmless.
	if err := s.Undo(ctx, "k", t0.Add(time.Second), 1, d2); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Take(ctx, "k", t0.Add(time.Second), 1); d.Allowed || d.Remaining != 0 {
		t.Fatalf("an expired lease's release freed a slot: %+v", d)
	}
}

func TestTakeError(t *testing.T) {
	srv, c := newClient(t)
	s := mustStore(t, c, mustLimiter(t, algorithms.GCRA, oneTier(1, time.Second)), "err")
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); err == nil {
		t.Fatal("Take against a stopped Redis did not fail")
	}
}

// TestLargeCost: a cost of thousands of units (sliding_log logs one member
// per unit) works, admitted and with count_rejected.
func TestLargeCost(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, cr := range []bool{false, true} {
		cfg := oneTier(20000, time.Minute)
		cfg.CountRejected = cr
		l := mustLimiter(t, algorithms.SlidingLog, cfg)
		s := mustStore(t, c, l, fmt.Sprintf("large-%v", cr))
		st := l.NewState()
		for i, cost := range []int64{12345, 12345, 20000, 5, 30000} {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			want := st.Take(now, cost)
			got, err := s.Take(ctx, "k", now, cost)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffDecision(want, got, true); d != "" {
				t.Fatalf("count_rejected %v, take %d of %d: %s", cr, i, cost, d)
			}
		}
	}
}

// TestMemoryPerKey logs what one key costs in Redis per algorithm (MEMORY
// USAGE of its keys) after 10 admitted Takes of a 100/min limit, one tier.
func TestMemoryPerKey(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, name := range algorithms.Names {
		s := mustStore(t, c, mustLimiter(t, name, oneTier(100, time.Minute)), "mem")
		for i := 0; i < 10; i++ {
			if _, err := s.Take(ctx, "203.0.113.7", t0.Add(time.Duration(i)*time.Millisecond), 1); err != nil {
				t.Fatal(err)
			}
		}
		total := int64(0)
		for _, k := range s.Keys("203.0.113.7") {
			total += c.MemoryUsage(ctx, k).Val()
		}
		t.Logf("%-15s %4d bytes per key (10 events in the window)", name, total)
		// The README's figures, with room for allocator differences
		// between Redis versions: a few hundred bytes, not kilobytes.
		limit := int64(256)
		if name == algorithms.SlidingLog || name == algorithms.Concurrency {
			limit = 1024
		}
		if total <= 0 || total > limit {
			t.Errorf("%s: %d bytes per key, want 1 to %d", name, total, limit)
		}
	}
}

// TestConcurrencyAcrossInstances: three stores share one key limited to 10
// in flight; 64 goroutines take, hold and release; never more than 10 are
// in flight, and every lease is gone at the end.
func TestConcurrencyAcrossInstances(t *testing.T) {
	srv, c := newClient(t)
	ctx := context.Background()
	l := mustLimiter(t, algorithms.Concurrency, oneTier(10, time.Hour))
	var stores []*Store
	for i := 0; i < 3; i++ {
		ci := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
		t.Cleanup(func() { ci.Close() })
		stores = append(stores, mustStore(t, ci, l, "inflight"))
	}
	var inFlight, maxSeen, admitted atomic.Int64
	inParallel(64, func(g int) {
		s := stores[g%3]
		for i := 0; i < 8; i++ {
			d, err := s.Take(ctx, "k", time.Time{}, 1)
			if err != nil {
				t.Error(err)
				return
			}
			if !d.Allowed {
				continue
			}
			admitted.Add(1)
			n := inFlight.Add(1)
			for {
				m := maxSeen.Load()
				if n <= m || maxSeen.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(200 * time.Microsecond)
			inFlight.Add(-1)
			if err := s.Undo(ctx, "k", time.Time{}, 1, d); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if m := maxSeen.Load(); m > 10 || m < 1 {
		t.Fatalf("%d in flight at most, want 1..10", m)
	}
	if n := c.ZCard(ctx, stores[0].Keys("k")[1]).Val(); n != 0 {
		t.Fatalf("%d leases left after every request ended", n)
	}
	if h := c.HGet(ctx, stores[0].Keys("k")[0], "h").Val(); h != "0" {
		t.Fatalf("held = %q after every request ended", h)
	}
	t.Logf("%d admitted, at most %d in flight", admitted.Load(), maxSeen.Load())
}

// TestSentinelFailover: through a Sentinel client the store works; when the
// master dies the sentinel promotes the replica, which holds the replicated
// state, and the script (not in the new master's script cache: NOSCRIPT)
// is sent again with EVAL.
func TestSentinelFailover(t *testing.T) { testSentinelFailover(t, nil) }

// testSentinelFailover is TestSentinelFailover with the store's calls sent
// through the Pipeliner that pipe returns for the client (none: nil).
func testSentinelFailover(t *testing.T, pipe func(redis.UniversalClient) *Pipeliner) {
	if testing.Short() {
		t.Skip("-short: no failover")
	}
	st := redistest.StartSentinel(t, 1, 1)
	// Timeouts long enough for a loaded machine: the calls that must
	// succeed do not time out, and the killed master refuses at once.
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    st.MasterName,
		SentinelAddrs: st.SentinelAddrs,
		MaxRetries:    -1,
		DialTimeout:   2 * time.Second,
		ReadTimeout:   2 * time.Second,
	})
	defer c.Close()
	ctx := context.Background()
	o := Options{KeyPrefix: "rltest:", Zone: "failover"}
	if pipe != nil {
		o.Pipeliner = pipe(c)
		defer o.Pipeliner.Close()
	}
	s, err := NewStore(c, mustLimiter(t, algorithms.GCRA, oneTier(3, time.Minute)), o)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if d, err := s.Take(ctx, "k", t0, 1); err != nil || !d.Allowed {
			t.Fatalf("take %d: %+v %v", i, d, err)
		}
	}
	// Wait for the replica to have the writes, then kill the master.
	for i := 0; ; i++ {
		n, err := c.Do(ctx, "WAIT", 1, 100).Int() // within the read timeout
		if err == nil && n == 1 {
			break
		}
		if i == 50 {
			t.Fatalf("WAIT: %d %v", n, err)
		}
	}
	st.Master.Stop()
	deadline := time.Now().Add(15 * time.Second)
	var d algorithms.Decision
	for {
		if d, err = s.Take(ctx, "k", t0, 1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("third take after the failover: %+v (the state should have survived)", d)
	}
	if d, err = s.Take(ctx, "k", t0, 1); err != nil || d.Allowed {
		t.Fatalf("fourth take: %+v %v", d, err)
	}
}

// takeWith is s's Take of cost 1 for key with the lease token token, as a
// Take whose answer was lost made it.
func takeWith(t *testing.T, s *Store, key string, token uint64) algorithms.Decision {
	t.Helper()
	c := storeCall{s: s, key: key, cost: 1, n: token}
	var r reply
	s.call(context.Background(), &c, &r)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return decisionOf(r.ints())
}

// ccState is how many units key holds in s and how many members (leases
// and tombstones) its sorted set has.
func ccState(t *testing.T, c *redis.Client, s *Store, key string) (held, members int64) {
	t.Helper()
	st, err := s.Inspect(context.Background(), key, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	members, err = c.ZCard(context.Background(), s.Keys(key)[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return st.Tiers[0].Limit - st.Tiers[0].Remaining, members
}

// A forget gives back the lease its take made; one that comes first (the
// take still unread on a connection Redis has not served yet) leaves a
// tombstone that the take consumes instead of a slot. Forgetting twice is
// harmless, and a tombstone nobody consumes holds no slot.
func TestForgetLease(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	s := mustStore(t, c, mustLimiter(t, algorithms.Concurrency, oneTier(2, time.Hour)), "forget")
	tok := func(i uint64) uint64 { return s.tokens + 1000 + i }
	expect := func(step string, held, members int64) {
		t.Helper()
		if h, m := ccState(t, c, s, "k"); h != held || m != members {
			t.Fatalf("%s: %d units held, %d members; want %d and %d", step, h, m, held, members)
		}
	}

	if d := takeWith(t, s, "k", tok(1)); !d.Allowed || d.Token != tok(1) {
		t.Fatalf("take: %+v, want admitted with token %d", d, tok(1))
	}
	expect("after a take", 1, 1)
	if err := s.forget(ctx, "k", 1, tok(1)); err != nil {
		t.Fatal(err)
	}
	expect("after its forget", 0, 0)

	if err := s.forget(ctx, "k", 1, tok(2)); err != nil {
		t.Fatal(err)
	}
	expect("after a forget that came first", 0, 1)
	if ttl := c.PTTL(ctx, s.Keys("k")[1]).Val(); ttl > 5*time.Minute+Margin || ttl < 4*time.Minute {
		t.Errorf("the tombstone's key lives %v, want 5 minutes (not the hour of the window)", ttl)
	}
	if d := takeWith(t, s, "k", tok(2)); d.Allowed {
		t.Fatalf("the forgotten take: %+v, want nothing taken", d)
	}
	expect("after the forgotten take ran", 0, 0)

	for i := uint64(3); i <= 4; i++ {
		if d := takeWith(t, s, "k", tok(i)); !d.Allowed {
			t.Fatalf("take %d: %+v, want admitted", i, d)
		}
	}
	if d := takeWith(t, s, "k", tok(5)); d.Allowed {
		t.Fatalf("a third take of 2: %+v, want denied", d)
	}
	for range 2 {
		if err := s.forget(ctx, "k", 1, tok(3)); err != nil {
			t.Fatal(err)
		}
	}
	expect("after forgetting an admitted take twice", 1, 2) // tok(4)'s lease, tok(3)'s tombstone
	if d := takeWith(t, s, "k", tok(6)); !d.Allowed {
		t.Fatalf("a take beside a tombstone: %+v, want admitted", d)
	}
	expect("after a take beside a tombstone", 2, 3)
}

// A concurrency Take that times out on a hung Redis (stopped here) fails
// unsettled, through go-redis and through the direct connection: Redis
// runs it once it goes on, and its Forget then gives the lease back. A
// Take that could not reach Redis, or of another algorithm, fails
// settled: nothing to forget.
func TestTimedOutTakeUnsettled(t *testing.T) {
	srv := redistest.Start(t)
	for _, direct := range []bool{false, true} {
		name := "go-redis"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			o := Options{KeyPrefix: "rltest:", Zone: "unsettled-" + name}
			if direct {
				p := NewDirectPipeliner(c, 0)
				t.Cleanup(func() { p.Close() })
				o.Pipeliner = p
			}
			s, err := NewStore(c, mustLimiter(t, algorithms.Concurrency, oneTier(1, time.Hour)), o)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil { // the connection and the script
				t.Fatal(err)
			}
			srv.Pause()
			_, err = s.Take(ctx, "k", time.Time{}, 1)
			srv.Resume()
			u, ok := errors.AsType[*store.Unsettled](err)
			if !ok {
				t.Fatalf("Take on a hung Redis: %v, want a store.Unsettled", err)
			}
			storetest.WaitFor(t, "the lost take to run", func() bool { h, _ := ccState(t, c, s, "k"); return h == 1 })
			if err := u.Forget(ctx); err != nil {
				t.Fatal(err)
			}
			if h, m := ccState(t, c, s, "k"); h != 0 || m != 0 {
				t.Fatalf("after the forget: %d units held, %d members, want none", h, m)
			}
		})
	}

	t.Run("settled", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		gcra := mustStore(t, c, mustLimiter(t, algorithms.GCRA, oneTier(1, time.Hour)), "settled-gcra")
		if _, err := gcra.Take(context.Background(), "warm", time.Time{}, 1); err != nil {
			t.Fatal(err)
		}
		srv.Pause()
		_, err := gcra.Take(context.Background(), "k", time.Time{}, 1)
		srv.Resume()
		if err == nil {
			t.Fatal("gcra Take on a hung Redis: no error")
		}
		if _, ok := errors.AsType[*store.Unsettled](err); ok {
			t.Fatalf("gcra Take: %v is unsettled: only a lease needs forgetting", err)
		}
		// A connection dialed to a hung Redis (the kernel accepts it) whose
		// opening PING times out: the take was never written.
		fresh := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { fresh.Close() })
		p := NewDirectPipeliner(fresh, 0)
		t.Cleanup(func() { p.Close() })
		cold, err := NewStore(fresh, mustLimiter(t, algorithms.Concurrency, oneTier(1, time.Hour)), Options{KeyPrefix: "rltest:", Zone: "settled-dial", Pipeliner: p})
		if err != nil {
			t.Fatal(err)
		}
		srv.Pause()
		_, err = cold.Take(context.Background(), "k", time.Time{}, 1)
		srv.Resume()
		if err == nil {
			t.Fatal("Take on a new connection to a hung Redis: no error")
		}
		if _, ok := errors.AsType[*store.Unsettled](err); ok {
			t.Fatalf("Take whose connection's PING timed out: %v is unsettled", err)
		}
		down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { down.Close() })
		cc := mustStore(t, down, mustLimiter(t, algorithms.Concurrency, oneTier(1, time.Hour)), "settled-cc")
		_, err = cc.Take(context.Background(), "k", time.Time{}, 1)
		if err == nil {
			t.Fatal("Take without a Redis: no error")
		}
		if _, ok := errors.AsType[*store.Unsettled](err); ok {
			t.Fatalf("Take that could not dial: %v is unsettled", err)
		}
	})
}
