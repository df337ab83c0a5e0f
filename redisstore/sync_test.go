package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// TestSyncSingleInstance: one instance admits exactly Events per window,
// paced by its per-interval budget, with the right RetryAfter for either
// refusal; windows roll over; Undo gives back before and after the push;
// a cost above the budget is not starved.
func TestSyncSingleInstance(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const E, W, I = 20, 10 * time.Second, time.Second
	clk := new(storetest.Clock)
	base := alignedAfter(t0, W)
	clk.Set(base)
	s := newTestSync(t, c, algorithms.FixedWindow, algorithms.Config{Tiers: []algorithms.Tier{{Events: E, Window: W}}}, I, clk, "single")
	if got := s.Budget(0); got != 2 {
		t.Fatalf("budget %d, want 2", got)
	}
	for win := 0; win < 3; win++ {
		ws := base.Add(time.Duration(win) * W)
		admitted := int64(0)
		for k := 0; k < 10; k++ {
			tk := ws.Add(time.Duration(k) * I)
			clk.Set(tk)
			mustSync(t, ctx, s)
			at := tk.Add(100 * time.Millisecond)
			used := int64(0) // of the interval's budget, 2
			for {
				d, err := s.Take(ctx, "k", at, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
					used++
					// Remaining is what this instance may still admit:
					// the budget's rest, then the window's.
					if d.Remaining != min(E-admitted, 2-used) || d.ResetAfter != ws.Add(W).Sub(at) || d.RetryAfter != 0 {
						t.Fatalf("window %d interval %d: allowed %+v after %d", win, k, d, admitted)
					}
					if admitted < E && d.MoreAfter != I-100*time.Millisecond {
						t.Fatalf("window %d interval %d: allowed %+v after %d, want more units after the next sync", win, k, d, admitted)
					}
					continue
				}
				if admitted >= E {
					// The window is full: wait for the next one.
					if d.RetryAfter != ws.Add(W).Sub(at) || d.Remaining != 0 || d.Limit != E || d.Tier != 0 {
						t.Fatalf("window %d interval %d: full, got %+v", win, k, d)
					}
				} else if d.RetryAfter != I-100*time.Millisecond || d.Remaining != 0 || d.MoreAfter != d.RetryAfter {
					// Only the budget refused: wait for the next sync.
					t.Fatalf("window %d interval %d: budget, got %+v after %d", win, k, d, admitted)
				}
				break
			}
		}
		if admitted != E {
			t.Fatalf("window %d: %d admitted, want %d", win, admitted, E)
		}
		clk.Set(ws.Add(W - time.Millisecond))
		mustSync(t, ctx, s)
		if got := redisInt(t, c, s.counterKey("k", 0, ws)); got != E {
			t.Fatalf("window %d: Redis holds %d, want %d", win, got, E)
		}
	}

	// Undo before the push cancels locally; after the push it sends -cost.
	at := base.Add(5 * W).Add(10 * time.Millisecond)
	clk.Set(at)
	mustSync(t, ctx, s)
	d1, _ := s.Take(ctx, "u", at, 1)
	d2, _ := s.Take(ctx, "u", at, 1)
	if !d1.Allowed || !d2.Allowed {
		t.Fatal(d1, d2)
	}
	if err := s.Undo(ctx, "u", at, 1, d2); err != nil {
		t.Fatal(err)
	}
	mustSync(t, ctx, s)
	if got := redisInt(t, c, s.counterKey("u", 0, at)); got != 1 {
		t.Fatalf("undo before push: Redis holds %d, want 1", got)
	}
	if err := s.Undo(ctx, "u", at, 1, d1); err != nil {
		t.Fatal(err)
	}
	mustSync(t, ctx, s)
	if got := redisInt(t, c, s.counterKey("u", 0, at)); got != 0 {
		t.Fatalf("undo after push: Redis holds %d, want 0", got)
	}
	// Nothing left to give back: a second Undo changes nothing.
	if err := s.Undo(ctx, "u", at, 1, d1); err != nil {
		t.Fatal(err)
	}
	// Remaining is the budget's rest (2-1), below the window's (E-1).
	if d, _ := s.Take(ctx, "u", at, 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after undo: %+v", d)
	}

	// A cost above the budget passes when nothing is pending this
	// interval; then the budget waits for the next sync.
	d, _ := s.Take(ctx, "big", at, 5)
	if !d.Allowed || d.Remaining != 0 || d.MoreAfter != I {
		t.Fatalf("cost 5 > budget 2 with nothing pending: %+v", d)
	}
	d, _ = s.Take(ctx, "big", at, 1)
	if d.Allowed || d.RetryAfter != I || d.Remaining != 0 {
		t.Fatalf("after cost 5: %+v, want a refusal until the next sync (%s)", d, I)
	}
	clk.Set(at.Add(I))
	mustSync(t, ctx, s)
	if d, _ = s.Take(ctx, "big", at.Add(I), 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after the sync: %+v", d)
	}

	// A refusal by the window before the interval's first admission says
	// the budget's rest (2), not the window's (3): two requests of cost 1
	// pass before the next sync, not three.
	at = at.Add(2 * I)
	clk.Set(at)
	mustSync(t, ctx, s)
	if d, _ = s.Take(ctx, "edge", at, E-3); !d.Allowed {
		t.Fatalf("cost %d, nothing pending: %+v", E-3, d)
	}
	clk.Set(at.Add(I))
	mustSync(t, ctx, s)
	if d, _ = s.Take(ctx, "edge", at.Add(I), 4); d.Allowed || d.Remaining != 2 {
		t.Fatalf("cost 4 with 3 left in the window, first of the interval: %+v, want refused with 2 remaining", d)
	}
}

// TestSyncMatchesMemory: one instance whose budget never binds (a long
// interval) decides exactly as the memory store's algorithm, field by
// field, through random timelines with several tiers, count_rejected,
// Undo, time going backwards, costs above a tier's Events, window
// roll-overs and syncs at random instants.
func TestSyncMatchesMemory(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	tiers := []algorithms.Tier{{Events: 5, Window: time.Second}, {Events: 12, Window: 5 * time.Second}}
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		for _, cr := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/count_rejected=%v", name, cr), func(t *testing.T) {
				cfg := algorithms.Config{Tiers: tiers, CountRejected: cr}
				l, err := algorithms.New(name, cfg)
				if err != nil {
					t.Fatal(err)
				}
				clk := new(storetest.Clock)
				clk.Set(t0)
				s := newTestSync(t, c, name, cfg, 1000*time.Second, clk, fmt.Sprintf("conf-%s-%v", name, cr))
				rng := rand.New(rand.NewPCG(7, uint64(len(name))))
				keys := []string{"a", "b b", "{c}"}
				states := map[string]algorithms.State{}
				type taken struct {
					key  string
					cost int64
					d    algorithms.Decision
				}
				var admitted []taken
				now := t0
				for step := 0; step < 600; step++ {
					switch r := rng.IntN(100); {
					case r < 5:
						now = now.Add(-time.Duration(rng.IntN(500)) * time.Millisecond)
					case r < 50:
						now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
					case r < 80:
						now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
					}
					clk.Set(now)
					if rng.IntN(5) == 0 {
						mustSync(t, ctx, s)
					}
					if rng.IntN(8) == 0 && len(admitted) > 0 {
						tk := admitted[rng.IntN(len(admitted))]
						states[tk.key].Undo(now, tk.cost, tk.d)
						if err := s.Undo(ctx, tk.key, now, tk.cost, tk.d); err != nil {
							t.Fatal(err)
						}
						continue
					}
					key := keys[rng.IntN(len(keys))]
					cost := int64(rng.IntN(4))
					if rng.IntN(20) == 0 {
						cost = 6 // above the first tier's Events
					}
					st := states[key]
					if st == nil {
						st = l.NewState()
						states[key] = st
					}
					want := st.Take(now, cost)
					got, err := s.Take(ctx, key, now, cost)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("step %d: Take(%q, %s, %d) = %+v, memory store says %+v", step, key, now.Format("15:04:05.000000"), cost, got, want)
					}
					if got.Allowed {
						admitted = append(admitted, taken{key, cost, got})
						if len(admitted) > 20 {
							admitted = admitted[1:]
						}
					}
				}
			})
		}
	}
}

// TestSyncThreeInstances: three instances (three clients, one Redis, one
// fake clock), 100 per 10 s, interval 1 s, so a budget c = 10 per instance
// and interval. Every interval each instance admits what it can, then all
// sync. Over the windows: what was admitted never exceeds
// Events + (N-1)*c (nor the README's Events + N*rate*interval) and, with
// greedy clients, reaches Events in every window; once the window is full,
// after the syncs every instance denies.
func TestSyncThreeInstances(t *testing.T) {
	srv, _ := newClient(t)
	ctx := context.Background()
	const (
		N      = 3
		E      = 100
		W      = 10 * time.Second
		I      = time.Second
		rounds = 50
	)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: E, Window: W}}}
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		for _, greedy := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/greedy=%v", name, greedy), func(t *testing.T) {
				clk := new(storetest.Clock)
				base := alignedAfter(t0, W)
				clk.Set(base)
				stores := make([]*SyncStore, N)
				for i := range stores {
					c := redis.NewClient(&redis.Options{Addr: srv.Addr})
					t.Cleanup(func() { c.Close() })
					stores[i] = newTestSync(t, c, name, cfg, I, clk, fmt.Sprintf("three-%s-%v", name, greedy))
				}
				c := stores[0].Budget(0)
				if c != 10 {
					t.Fatalf("budget %d, want 10", c)
				}
				maxCost := int64(1)
				if !greedy {
					maxCost = 3
				}
				bound := float64(E + (N-1)*max(c, maxCost))
				readme := float64(E + N*E*int64(I)/int64(W)) // instances x rate x interval
				p := &stores[0].tiers[0]
				counts := map[int]int64{} // true units admitted per window
				// estimate is the true count (fixed_window) or sliding
				// estimate at at, from every instance's admissions.
				estimate := func(at time.Time) float64 {
					w := int(at.Sub(base) / W)
					if name == algorithms.FixedWindow {
						return float64(counts[w])
					}
					e := at.Sub(base.Add(time.Duration(w) * W)).Microseconds()
					// The previous window's count weighted by its overlap.
					x := float64(float64(counts[w-1]) * float64(p.window-e))
					return x/float64(p.window) + float64(counts[w])
				}
				full := func(at time.Time) bool { // a cost of 1 no longer fits
					w := int(at.Sub(base) / W)
					if name == algorithms.FixedWindow {
						return counts[w] > E-1
					}
					e := at.Sub(base.Add(time.Duration(w) * W)).Microseconds()
					fits, _, _, _ := slidingWindow(p.events, p.window, 0, counts[w-1], counts[w], e, 1, false)
					return !fits
				}
				rng := rand.New(rand.NewPCG(3, 4))
				worst := 0.0
				sawFull := map[int]bool{}
				for k := 0; k < rounds; k++ {
					tk := base.Add(time.Duration(k) * I)
					w := k * int(I) / int(W)
					at := tk.Add(time.Millisecond)
					clk.Set(at)
					var active [N]bool // took this round: synced twice below
					for j := 0; j < N; j++ {
						i := (j + k) % N
						attempts := 1000
						if !greedy {
							attempts = rng.IntN(20)
						}
						active[i] = attempts > 0
						for a := 0; a < attempts; a++ {
							cost := int64(1)
							if !greedy {
								cost = 1 + rng.Int64N(maxCost)
							}
							d, _ := stores[i].Take(ctx, "k", at, cost)
							if !d.Allowed {
								if greedy {
									break
								}
								continue
							}
							counts[w] += cost
							est := estimate(at)
							worst = max(worst, est)
							if est > bound || est > readme {
								t.Fatalf("round %d: %.2f admitted in the window, bound %.0f (README %.0f)", k, est, bound, readme)
							}
						}
					}
					// Everybody syncs, in turn, half an interval later.
					st := tk.Add(I / 2)
					clk.Set(st)
					for j := 0; j < N; j++ {
						mustSync(t, ctx, stores[(j+k)%N])
					}
					if full(st) {
						sawFull[w] = true
						// Once more (what the next interval does anyway):
						// now every instance active this round has read
						// every push. (One quiet for two intervals decides
						// its next Take on what it read last: that is the
						// over-admission the bound allows.)
						for _, s := range stores {
							mustSync(t, ctx, s)
						}
						for i, s := range stores {
							if !active[i] {
								continue
							}
							d, _ := s.Take(ctx, "k", st, 1)
							if d.Allowed {
								t.Fatalf("round %d: instance %d admits in a full window (%.2f)", k, i, estimate(st))
							}
							if d.RetryAfter <= 0 || name == algorithms.FixedWindow && d.RetryAfter != base.Add(time.Duration(w+1)*W).Sub(st) {
								t.Fatalf("round %d: instance %d: RetryAfter %s", k, i, d.RetryAfter)
							}
						}
					}
					if greedy && (k+1)%10 == 0 {
						if name == algorithms.FixedWindow && counts[w] < E {
							t.Fatalf("window %d: only %d admitted of %d", w, counts[w], E)
						}
						if !sawFull[w] {
							t.Fatalf("window %d: never full (%v)", w, counts)
						}
					}
				}
				t.Logf("admitted per window %v; worst %.2f, bound %.0f, README bound %.0f", counts, worst, bound, readme)
				if greedy && worst <= E {
					t.Errorf("greedy instances never over-admitted (worst %.2f): the test does not exercise the bound", worst)
				}
			})
		}
	}
}

// TestSyncRedisCalls: Take sends nothing to Redis; a sync of K active keys
// runs K scripts (EVALSHA) in one round trip; a key with no Take for two
// intervals costs nothing.
func TestSyncRedisCalls(t *testing.T) {
	srv, c := newClient(t)
	ctx := context.Background()
	sc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer sc.Close()
	hook := &countHook{}
	sc.AddHook(hook)
	clk := new(storetest.Clock)
	clk.Set(t0)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1000, Window: time.Minute}, {Events: 100, Window: time.Second}}}
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		s := newTestSync(t, sc, name, cfg, time.Second, clk, "calls-"+name)
		const K = 25
		for k := 0; k < K; k++ {
			s.Take(ctx, fmt.Sprintf("warm%d", k), t0, 1)
		}
		mustSync(t, ctx, s) // loads the script (NOSCRIPT, then EVAL)
		mustSync(t, ctx, s)
		mustSync(t, ctx, s) // the warm keys are quiet now
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hook.cmds.Store(0)
		hook.trips.Store(0)
		for r := 0; r < 3; r++ {
			for k := 0; k < K; k++ {
				s.Take(ctx, fmt.Sprintf("k%d", k), t0, 1)
			}
		}
		s.Undo(ctx, "k0", t0, 1, algorithms.Decision{Allowed: true})
		if n, stats := scriptCalls(t, c); n != 0 || hook.cmds.Load() != 0 {
			t.Fatalf("%s: Takes sent %d commands, %d scripts ran: %v", name, hook.cmds.Load(), n, stats)
		}
		for round, want := range []int64{K, K, 0} {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			hook.cmds.Store(0)
			hook.trips.Store(0)
			mustSync(t, ctx, s)
			n, stats := scriptCalls(t, c)
			if n != want || hook.cmds.Load() != want {
				t.Fatalf("%s: sync %d of %d keys: %d scripts ran, %d commands sent, want %d: %v", name, round, K, n, hook.cmds.Load(), want, stats)
			}
			if want > 0 && hook.trips.Load() != 1 {
				t.Fatalf("%s: sync %d: %d round trips, want 1 pipeline", name, round, hook.trips.Load())
			}
			for cmd := range stats {
				switch cmd {
				case "evalsha", "incrby", "pexpire", "get", "config|resetstat", "info":
				default:
					t.Errorf("%s: unexpected command %s", name, cmd)
				}
			}
		}
	}
}

// TestSyncRedisDown: Redis stopped during syncs: no panic, the syncs fail
// with one report each, Takes go on deciding locally, and every count kept
// is pushed once Redis is back (the script is loaded again after NOSCRIPT).
func TestSyncRedisDown(t *testing.T) {
	srv, c := newDownableClient(t)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Hour)
	clk.Set(base)
	var reports atomic.Int64
	var lastErr atomic.Value
	l, err := algorithms.New(algorithms.SlidingWindow, algorithms.Config{Tiers: []algorithms.Tier{{Events: 50, Window: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: "down"}, SyncOptions{
		Interval: 10 * time.Minute, // a budget of 9 per interval
		Now:      clk.Now,
		OnError: func(err error) {
			reports.Add(1)
			lastErr.Store(err)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	take := func(key string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if d, err := s.Take(ctx, key, clk.Now(), 1); err != nil || !d.Allowed {
				t.Fatalf("Take %s: %+v %v", key, d, err)
			}
		}
	}
	take("a", 3)
	take("b", 1)
	mustSync(t, ctx, s)
	if got := redisInt(t, c, s.counterKey("a", 0, base)); got != 3 {
		t.Fatalf("before: %d", got)
	}

	srv.Stop()
	clk.Set(base.Add(time.Minute))
	take("a", 4)
	if err := s.Sync(ctx); err == nil || reports.Load() != 1 {
		t.Fatalf("sync with Redis down: err %v, %d reports", err, reports.Load())
	}
	t.Logf("reported: %v", lastErr.Load())
	if !strings.Contains(fmt.Sprint(lastErr.Load()), "2 of 2 keys") {
		t.Errorf("report %q does not say how many keys failed", lastErr.Load())
	}
	clk.Set(base.Add(2 * time.Minute))
	take("a", 2)
	take("b", 5)
	if err := s.Sync(ctx); err == nil || reports.Load() != 2 {
		t.Fatalf("second sync with Redis down: err %v, %d reports", err, reports.Load())
	}
	// Local decisions still see every unit: 3 + 4 + 2 of 50.
	if d, _ := s.Take(ctx, "a", clk.Now(), 0); d.Remaining != 50-9 {
		t.Fatalf("local view while Redis is down: %+v", d)
	}

	srv.Restart() // empty: no data, no script
	var syncErr error
	for i := 0; i < 3; i++ { // a pooled connection may still be the dead one
		if syncErr = s.Sync(ctx); syncErr == nil {
			break
		}
	}
	if syncErr != nil {
		t.Fatalf("sync after restart: %v", syncErr)
	}
	if got := redisInt(t, c, s.counterKey("a", 0, base)); got != 6 {
		t.Fatalf("after restart: Redis holds %d for a, want the 6 units counted while it was down", got)
	}
	if got := redisInt(t, c, s.counterKey("b", 0, base)); got != 5 {
		t.Fatalf("after restart: Redis holds %d for b, want 5", got)
	}
	assertTTLs(t, c, "rlsync:down:*", 2*time.Hour+Margin)
}

// TestSyncOutageDropsEndedWindows: counts kept unsent through an outage
// are no longer sent a window after their windows stopped counting: the
// key is dropped as idle, and no dead key is written to Redis once it is
// back.
func TestSyncOutageDropsEndedWindows(t *testing.T) {
	srv, c := newDownableClient(t)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Hour)
	clk.Set(base)
	for _, alg := range []string{algorithms.SlidingWindow, algorithms.FixedWindow} {
		l, err := algorithms.New(alg, algorithms.Config{Tiers: []algorithms.Tier{{Events: 50, Window: time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: "ended-" + alg}, SyncOptions{Interval: 10 * time.Minute, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clk.Set(base)
		if d, err := s.Take(ctx, "a", clk.Now(), 3); err != nil || !d.Allowed {
			t.Fatalf("%s: Take: %+v %v", alg, d, err)
		}
		srv.Stop()
		if err := s.Sync(ctx); err == nil {
			t.Fatalf("%s: sync with Redis down succeeded", alg)
		}
		// The previous window still counts for sliding_window: kept.
		clk.Set(base.Add(time.Hour + time.Minute))
		err = s.Sync(ctx)
		if alg == algorithms.SlidingWindow && (err == nil || s.Len() != 1) {
			t.Fatalf("%s: a window later: sync error %v, %d keys, want the count kept", alg, err, s.Len())
		}
		// A window after the last that counts (a clock a little
		// behind could still read that one).
		clk.Set(base.Add(3*time.Hour + time.Minute))
		if err := s.Sync(ctx); err != nil || s.Len() != 0 {
			t.Fatalf("%s: a window after its windows ended: sync error %v, %d keys held, want none and no call", alg, err, s.Len())
		}
		srv.Restart()
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("%s: sync after the restart: %v", alg, err)
		}
		if n := assertTTLs(t, c, "rlsync:ended-"+alg+":*", 3*time.Hour); n != 0 {
			t.Fatalf("%s: %d keys written to Redis for ended windows", alg, n)
		}
	}
}

// assertTTLs checks that every key matching pattern has a TTL in
// (0, most].
func assertTTLs(t testing.TB, c redis.UniversalClient, pattern string, most time.Duration) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		n++
		ttl, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > most {
			t.Errorf("key %s: PTTL %s, want in (0, %s]", iter.Val(), ttl, most)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSyncKeysHaveTTL: every key the syncs write, whatever the algorithm,
// tier, window or delta sign, has a TTL of at most the window (twice for
// sliding_window) plus the margin.
func TestSyncKeysHaveTTL(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: 2 * time.Second}, {Events: 10, Window: time.Minute}}, CountRejected: true}
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		clk := new(storetest.Clock)
		clk.Set(t0)
		s := newTestSync(t, c, name, cfg, time.Second, clk, "ttl-"+name)
		now := t0
		for i := 0; i < 60; i++ {
			now = now.Add(700 * time.Millisecond)
			clk.Set(now)
			key := fmt.Sprintf("k%d", i%4)
			d, _ := s.Take(ctx, key, now, int64(i%3))
			if d.Allowed && i%5 == 0 {
				mustSync(t, ctx, s)
				s.Undo(ctx, key, now, int64(i%3), d) // a negative delta
			}
			if i%2 == 0 {
				mustSync(t, ctx, s)
			}
		}
		most := time.Minute + Margin
		if name == algorithms.SlidingWindow {
			most = 2*time.Minute + Margin
		}
		if n := assertTTLs(t, c, "rlsync:ttl-"+name+":*", most); n == 0 {
			t.Fatalf("%s: no key written", name)
		}
	}
}

// TestSyncUnsupported: only the counter algorithms can be summed; the
// options are checked.
func TestSyncUnsupported(t *testing.T) {
	c := idleClient(t)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 5, Window: time.Second}}}
	for _, name := range algorithms.Names {
		l, err := algorithms.New(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSyncStore(c, l, Options{Zone: "z"}, SyncOptions{Interval: time.Second})
		if ok, _ := algorithms.Summable(name); ok {
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if err := s.Close(); err != nil { // nothing to push: no command
				t.Errorf("%s: Close: %v", name, err)
			}
		} else {
			_, all := algorithms.Summable(name)
			want := fmt.Sprintf("sync_interval works with algorithm %s, not %q", all, name)
			if err == nil || err.Error() != want {
				t.Errorf("%s: error %v, want %q", name, err, want)
			}
		}
	}
	l, _ := algorithms.New(algorithms.FixedWindow, cfg)
	if _, err := NewSyncStore(c, l, Options{}, SyncOptions{}); err == nil || !strings.Contains(err.Error(), "sync_interval must be positive") {
		t.Errorf("zero interval: %v", err)
	}
	if _, err := NewSyncStore(c, l, Options{KeyPrefix: "a{b"}, SyncOptions{Interval: time.Second}); err == nil || !strings.Contains(err.Error(), "brace") {
		t.Errorf("brace in key_prefix: %v", err)
	}
	if _, err := NewSyncStore(nil, l, Options{}, SyncOptions{Interval: time.Second}); err == nil {
		t.Error("nil client accepted")
	}
}

// TestSyncTicker: the goroutine pushes on its own every interval while
// Takes and Undos run concurrently (real clock); Close waits for it and
// pushes the rest; every unit admitted and not undone is in Redis.
func TestSyncTicker(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	l, err := algorithms.New(algorithms.FixedWindow, algorithms.Config{Tiers: []algorithms.Tier{{Events: 1 << 40, Window: 1000 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	var errs atomic.Int64
	s, err := NewSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: "ticker"}, SyncOptions{
		Interval: 20 * time.Millisecond,
		OnError:  func(error) { errs.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var net atomic.Int64
	inParallel(8, func(g int) {
		for i := 0; i < 2000; i++ {
			key := fmt.Sprintf("k%d", (g+i)%4)
			d, _ := s.Take(ctx, key, time.Time{}, 1)
			if !d.Allowed {
				t.Errorf("denied: %+v", d)
				return
			}
			net.Add(1)
			if i%7 == 0 {
				s.Undo(ctx, key, time.Time{}, 1, d)
				net.Add(-1)
			}
		}
	})
	sum := func() int64 {
		var total int64
		iter := c.Scan(ctx, 0, "rlsync:ticker:*", 100).Iterator()
		for iter.Next(ctx) {
			total += redisInt(t, c, iter.Val())
		}
		return total
	}
	// The goroutine alone brings Redis up to date.
	deadline := time.Now().Add(5 * time.Second)
	for sum() != net.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s Redis holds %d, want %d", sum(), net.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		s.Take(ctx, "late", time.Time{}, 1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("Close returned before the goroutine")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sum(); got != net.Load()+10 {
		t.Fatalf("after Close Redis holds %d, want %d", got, net.Load()+10)
	}
	if errs.Load() != 0 {
		t.Fatalf("%d sync errors", errs.Load())
	}
}

// TestSyncMaxKeysAndIdle: at most twice MaxKeys keys are held when they all
// have counts to push (MaxKeys once pushed); a key with no Take for a whole
// window (two for sliding_window) is dropped by the next sync.
func TestSyncMaxKeysAndIdle(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 5, Window: 10 * time.Second}}}
	for _, name := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		clk := new(storetest.Clock)
		base := alignedAfter(t0, 10*time.Second)
		clk.Set(base)
		l, _ := algorithms.New(name, cfg)
		s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: "keys-" + name}, SyncOptions{Interval: time.Second, Now: clk.Now, MaxKeys: 8})
		if err != nil {
			t.Fatal(err)
		}
		// 8 shards of one key each, growing to two for keys with counts
		// to push; 200 keys fill every one (all but surely: a shard with
		// fewer than two has probability < 8 * 201 * (7/8)^199 < 1e-8).
		for i := 0; i < 200; i++ {
			s.Take(ctx, fmt.Sprintf("k%d", i), base, 1)
		}
		if n := s.Len(); n != 16 {
			t.Fatalf("%s: %d keys held, MaxKeys 8, every key with counts to push", name, n)
		}
		mustSync(t, ctx, s)
		clk.Set(base.Add(9 * time.Second))
		mustSync(t, ctx, s)
		if n := s.Len(); n != 16 {
			t.Fatalf("%s: %d keys held within the window", name, n)
		}
		clk.Set(base.Add(10 * time.Second))
		mustSync(t, ctx, s)
		want := 0
		if name == algorithms.SlidingWindow {
			want = 16 // the previous window still counts
		}
		if n := s.Len(); n != want {
			t.Fatalf("%s: %d keys held one window later, want %d", name, n, want)
		}
		clk.Set(base.Add(20 * time.Second))
		mustSync(t, ctx, s)
		if n := s.Len(); n != 0 {
			t.Fatalf("%s: %d keys held two windows later", name, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncCluster: on a Redis Cluster one sync's pipeline is split by slot
// (every key's counters share its hash tag), the script is loaded on every
// master on first use, and every counter lands where a reader finds it.
func TestSyncCluster(t *testing.T) {
	_, c := newClusterClient(t, 0)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Minute)
	clk.Set(base)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 100, Window: time.Minute}, {Events: 10, Window: time.Second}}}
	s := newTestSync(t, c, algorithms.SlidingWindow, cfg, time.Second, clk, "cluster")
	const K = 40
	for k := 0; k < K; k++ {
		for i := 0; i <= k%2; i++ {
			if d, _ := s.Take(ctx, fmt.Sprintf("k%d", k), base, 1); !d.Allowed {
				t.Fatalf("key %d: %+v", k, d)
			}
		}
	}
	mustSync(t, ctx, s)
	mustSync(t, ctx, s)
	for k := 0; k < K; k++ {
		key := fmt.Sprintf("k%d", k)
		for i := range cfg.Tiers {
			if got := redisInt(t, c, s.counterKey(key, i, base)); got != int64(k%2+1) {
				t.Fatalf("%s tier %d: %d in Redis, want %d", key, i, got, k%2+1)
			}
		}
	}
	masters := map[int64]bool{} // by the third of the slots each master holds
	for k := 0; k < K; k++ {
		slot := c.ClusterKeySlot(ctx, s.counterKey(fmt.Sprintf("k%d", k), 0, base)).Val()
		masters[slot*3/16384] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the keys all fell on one master: the test proves nothing")
	}
}
