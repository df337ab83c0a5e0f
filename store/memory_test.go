package store

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

var (
	_ Store            = (*Memory)(nil)
	_ caddy.Destructor = (*Memory)(nil)
)

var t0 = time.Unix(1_700_000_000, 0)

// fakeLimiter is a fixed-window counter that lets the store be tested on
// its own: at most limit units per aligned window.
type fakeLimiter struct {
	limit  int64
	window time.Duration
}

func (l fakeLimiter) Name() string { return "fake" }
func (l fakeLimiter) Config() algorithms.Config {
	return algorithms.Config{Tiers: []algorithms.Tier{{Events: l.limit, Window: l.window}}}
}
func (l fakeLimiter) NewState() algorithms.State { return &fakeState{l: l} }

type fakeState struct {
	l     fakeLimiter
	win   int64
	count int64
}

func (s *fakeState) roll(now time.Time) {
	if w := now.UnixNano() / int64(s.l.window); w > s.win {
		s.win, s.count = w, 0
	}
}

func (s *fakeState) Take(now time.Time, cost int64) algorithms.Decision {
	s.roll(now)
	d := algorithms.Decision{Limit: s.l.limit}
	if s.count+cost <= s.l.limit {
		s.count += cost
		d.Allowed = true
	} else {
		d.RetryAfter = time.Duration((s.win+1)*int64(s.l.window) - now.UnixNano())
	}
	d.Remaining = s.l.limit - s.count
	return d
}

func (s *fakeState) Undo(now time.Time, cost int64, d algorithms.Decision) {
	s.roll(now)
	if d.Allowed {
		s.count = max(0, s.count-cost)
	}
}

func (s *fakeState) Idle(now time.Time) bool {
	return s.count == 0 || now.UnixNano()/int64(s.l.window) > s.win
}

func newTestMemory(t testing.TB, l algorithms.Limiter, opts MemoryOptions) *Memory {
	t.Helper()
	if opts.SweepInterval == 0 {
		opts.SweepInterval = time.Hour // tests sweep by hand
	}
	m := NewMemory(l, opts)
	t.Cleanup(func() { m.Destruct() })
	return m
}

func take(t testing.TB, m *Memory, key string, now time.Time) algorithms.Decision {
	t.Helper()
	d, err := m.Take(context.Background(), key, now, 1)
	if err != nil {
		t.Fatalf("Take(%q): %v", key, err)
	}
	return d
}

// checkLinks fails the test unless every key m holds is linked exactly once
// in its shard's LRU list and no shard holds more than its budget.
func checkLinks(t *testing.T, m *Memory) {
	t.Helper()
	for i := range m.keys.shards {
		s := &m.keys.shards[i]
		n := 0
		for e := s.lru.next; e != &s.lru; e = e.next {
			if s.entries[e.key] != e {
				t.Fatalf("shard %d: listed entry %q not in map", i, e.key)
			}
			n++
		}
		if n != len(s.entries) || n > s.budget {
			t.Fatalf("shard %d: list %d, map %d, budget %d", i, n, len(s.entries), s.budget)
		}
	}
}

// keysInShard returns n distinct keys that all land in the shard of key.
func keysInShard(m *Memory, key string, n int) []string {
	want := m.keys.Shard(key)
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("other-%d", i)
		if m.keys.Shard(k) == want {
			out = append(out, k)
		}
	}
	return out
}

func TestMemoryKeysIndependent(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 3, window: time.Second}, MemoryOptions{})
	for i := range 3 {
		if d := take(t, m, "a", t0); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("a take %d: %+v", i, d)
		}
	}
	if d := take(t, m, "a", t0); d.Allowed {
		t.Fatalf("a take 4 allowed: %+v", d)
	}
	for i := range 3 {
		if d := take(t, m, "b", t0); !d.Allowed {
			t.Fatalf("b take %d denied: %+v", i, d)
		}
	}
	if d := take(t, m, "a", t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("a in the next window denied: %+v", d)
	}
	if got := m.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
}

func TestMemoryZeroNowUsesClock(t *testing.T) {
	now := t0
	m := newTestMemory(t, fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{
		Now: func() time.Time { return now },
	})
	if d := take(t, m, "k", time.Time{}); !d.Allowed {
		t.Fatalf("first take denied: %+v", d)
	}
	if d := take(t, m, "k", time.Time{}); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second take: %+v, want denied with RetryAfter 1s", d)
	}
	now = t0.Add(time.Second)
	if d := take(t, m, "k", time.Time{}); !d.Allowed {
		t.Fatalf("take after the clock moved denied: %+v", d)
	}
}

func TestMemoryEvictionBound(t *testing.T) {
	for _, maxKeys := range []int{1, 5, 63, 64, 1000} {
		t.Run(fmt.Sprint(maxKeys), func(t *testing.T) {
			m := newTestMemory(t, fakeLimiter{limit: 10, window: time.Minute}, MemoryOptions{MaxKeys: maxKeys})
			n := 200_000
			if maxKeys < 1000 {
				n = 10_000
			}
			for i := range n {
				take(t, m, fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), t0)
				if i%50_000 == 0 && m.Len() > maxKeys {
					t.Fatalf("after %d keys Len = %d > %d", i+1, m.Len(), maxKeys)
				}
			}
			if got := m.Len(); got > maxKeys || got < maxKeys*9/10 {
				t.Fatalf("Len = %d, want <= %d and close to it", got, maxKeys)
			}
			checkLinks(t, m)
		})
	}
}

func TestMemoryDefaultMaxKeys(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{})
	total := 0
	for i := range m.keys.shards {
		total += m.keys.shards[i].budget
	}
	if total != DefaultMaxKeys || len(m.keys.shards) != maxShards {
		t.Fatalf("budgets add up to %d over %d shards, want %d over %d", total, len(m.keys.shards), DefaultMaxKeys, maxShards)
	}
}

func TestMemoryLRU(t *testing.T) {
	// 64 keys over 64 shards: one per shard at most, so every shard that
	// holds a key is full.
	m := newTestMemory(t, fakeLimiter{limit: 2, window: time.Minute}, MemoryOptions{MaxKeys: 64})
	if got := len(m.keys.shards); got != 64 {
		t.Fatalf("%d shards, want 64", got)
	}
	s := m.keys.Shard("hot")
	if s.budget != 1 {
		t.Fatalf("budget %d, want 1", s.budget)
	}

	// With a budget of 1, a new key in the shard evicts the old one and a
	// later Take of the old key starts from nothing.
	others := keysInShard(m, "hot", 3)
	take(t, m, "hot", t0)
	take(t, m, "hot", t0)
	if d := take(t, m, "hot", t0); d.Allowed {
		t.Fatalf("hot over its limit allowed: %+v", d)
	}
	take(t, m, others[0], t0)
	if _, ok := s.entries["hot"]; ok {
		t.Fatal("hot not evicted by a newer key in a full shard")
	}
	if d := take(t, m, "hot", t0); !d.Allowed {
		t.Fatalf("evicted key did not start afresh: %+v", d)
	}

	// A bigger shard: the recently used key survives, the stalest goes.
	m = newTestMemory(t, fakeLimiter{limit: 2, window: time.Minute}, MemoryOptions{MaxKeys: 64 * 3})
	s = m.keys.Shard("hot")
	if s.budget != 3 {
		t.Fatalf("budget %d, want 3", s.budget)
	}
	others = keysInShard(m, "hot", 4)
	take(t, m, "hot", t0)     // hot
	take(t, m, others[0], t0) // o0 hot
	take(t, m, others[1], t0) // o1 o0 hot (full)
	take(t, m, "hot", t0)     // hot o1 o0
	take(t, m, others[2], t0) // o2 hot o1: o0 evicted
	take(t, m, others[1], t0) // o1 o2 hot
	take(t, m, others[3], t0) // o3 o1 o2: hot evicted
	want := []string{others[3], others[1], others[2]}
	var got []string
	for e := s.lru.next; e != &s.lru; e = e.next {
		got = append(got, e.key)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("LRU order %v, want %v", got, want)
	}
	if _, ok := s.entries[others[0]]; ok {
		t.Fatal("stalest key survived")
	}
	if d := take(t, m, "hot", t0); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("hot after eviction: %+v, want a fresh state", d)
	}
}

func TestMemoryUndo(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 2, window: time.Second}, MemoryOptions{MaxKeys: 64})
	ctx := context.Background()
	d1 := take(t, m, "k", t0)
	take(t, m, "k", t0)
	if d := take(t, m, "k", t0); d.Allowed {
		t.Fatalf("third take allowed: %+v", d)
	}
	if err := m.Undo(ctx, "k", t0, 1, d1); err != nil {
		t.Fatal(err)
	}
	if d := take(t, m, "k", t0); !d.Allowed {
		t.Fatalf("take after Undo denied: %+v", d)
	}

	// Undo of a key that is not held is a no-op and does not create it.
	if err := m.Undo(ctx, "never", t0, 1, d1); err != nil {
		t.Fatal(err)
	}
	// Undo of an evicted key is a no-op too.
	other := keysInShard(m, "k", 1)[0]
	take(t, m, other, t0) // the shard's budget is 1: evicts k
	if err := m.Undo(ctx, "k", t0, 1, d1); err != nil {
		t.Fatal(err)
	}
	if got := m.Len(); got != 1 {
		t.Fatalf("Len = %d, want 1 (Undo must not create keys)", got)
	}
}

func TestMemorySweep(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 5, window: time.Second}, MemoryOptions{})
	for i := range 1000 {
		take(t, m, fmt.Sprintf("old-%d", i), t0)
	}
	if n := m.Sweep(t0.Add(999 * time.Millisecond)); n != 0 {
		t.Fatalf("Sweep within the window dropped %d", n)
	}
	now := t0.Add(time.Second)
	for i := range 10 {
		take(t, m, fmt.Sprintf("old-%d", i), now) // active again
		take(t, m, fmt.Sprintf("new-%d", i), now)
	}
	if n := m.Sweep(now); n != 990 {
		t.Fatalf("Sweep dropped %d, want 990", n)
	}
	if got := m.Len(); got != 20 {
		t.Fatalf("Len = %d, want 20", got)
	}
	for i := range 10 {
		for _, k := range []string{fmt.Sprintf("old-%d", i), fmt.Sprintf("new-%d", i)} {
			if d := take(t, m, k, now); !d.Allowed || d.Remaining != 3 {
				t.Fatalf("%s lost its count: %+v", k, d)
			}
		}
	}
	// The lists still agree with the maps after sweeping.
	n := 0
	for i := range m.keys.shards {
		s := &m.keys.shards[i]
		for e := s.lru.next; e != &s.lru; e = e.next {
			n++
		}
	}
	if n != 20 {
		t.Fatalf("%d listed entries, want 20", n)
	}
	if n := m.Sweep(now.Add(time.Hour)); n != 20 || m.Len() != 0 {
		t.Fatalf("final Sweep dropped %d, Len %d", n, m.Len())
	}
}

func TestMemorySweepConcurrent(t *testing.T) {
	// Sweep lets go of shard locks while it ranges over them; Takes and
	// Sweeps interleaving must keep the maps and lists consistent.
	m := newTestMemory(t, fakeLimiter{limit: 1 << 40, window: time.Second}, MemoryOptions{MaxKeys: 2000})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20_000 {
				now := t0.Add(time.Duration(i/2000) * time.Second)
				take(t, m, fmt.Sprintf("%d-%d", g, i%3000), now)
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			m.Sweep(t0.Add(time.Duration(i/20) * time.Second))
		}
	})
	wg.Wait()
	checkLinks(t, m)
}

func TestMemoryConcurrentExactLimit(t *testing.T) {
	m := newTestMemory(t, fakeLimiter{limit: 100, window: time.Minute}, MemoryOptions{})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			for range 20 {
				if take(t, m, "shared", t0).Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != 100 {
		t.Fatalf("%d allowed, want exactly 100", got)
	}
}

func TestMemoryDestruct(t *testing.T) {
	before := runtime.NumGoroutine()
	clk := storetest.NewClock(t0)
	var sweeps atomic.Int64 // the sweeper reads the clock once a sweep
	m := NewMemory(fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{
		SweepInterval: time.Millisecond,
		Now: func() time.Time {
			sweeps.Add(1)
			return clk.Now()
		},
	})
	take(t, m, "k", t0)
	clk.Set(t0.Add(time.Hour))
	// The sweeper runs on its own: wait (bounded) for it to drop the key.
	deadline := time.Now().Add(10 * time.Second)
	for m.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not drop an idle key within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.Destruct(); err != nil {
		t.Fatal(err)
	}
	if err := m.Destruct(); err != nil { // idempotent
		t.Fatal(err)
	}
	select {
	case <-m.sweeper.done:
	default:
		t.Fatal("sweeper still running after Destruct")
	}
	n := sweeps.Load()
	time.Sleep(20 * time.Millisecond) // would be ~20 sweeps if it still ran
	if got := sweeps.Load(); got != n {
		t.Fatalf("sweeper ran %d times after Destruct", got-n)
	}
	// No goroutine left behind (others may be winding down: allow a moment).
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 1000 {
			t.Fatalf("%d goroutines, %d before NewMemory", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
	// The store stays usable after Destruct.
	if d := take(t, m, "k", t0.Add(2*time.Hour)); !d.Allowed {
		t.Fatalf("take after Destruct: %+v", d)
	}
}

func TestMemoryCollectedWithoutDestruct(t *testing.T) {
	sw := func() *sweeper {
		m := NewMemory(fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{SweepInterval: time.Hour})
		take(t, m, "k", t0)
		return m.sweeper
	}()
	for i := 0; ; i++ {
		runtime.GC()
		select {
		case <-sw.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if i == 500 {
			t.Fatal("the sweeper of an unreachable store is still running")
		}
	}
}

func TestMemoryDestructConcurrent(t *testing.T) {
	m := NewMemory(fakeLimiter{limit: 1, window: time.Second}, MemoryOptions{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { m.Destruct() })
	}
	wg.Wait()
}

func TestMemoryTakeNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	m := newTestMemory(t, fakeLimiter{limit: 1 << 40, window: time.Minute}, MemoryOptions{})
	keys := makeKeys(1000)
	for _, k := range keys {
		take(t, m, k, t0)
	}
	ctx := context.Background()
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		m.Take(ctx, keys[i%len(keys)], t0, 1)
		i++
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocs per Take of an existing key, want 0", allocs)
	}
}

// realLimiters returns the built-in algorithms that are implemented, with
// limit events per window; tests skip the ones still stubbed.
func realLimiters(t testing.TB, limit int64, window time.Duration) map[string]algorithms.Limiter {
	out := map[string]algorithms.Limiter{}
	for _, name := range algorithms.Names {
		l, err := algorithms.New(name, algorithms.Config{Tiers: []algorithms.Tier{{Events: limit, Window: window}}})
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		out[name] = l
	}
	return out
}

func TestMemoryRealAlgorithms(t *testing.T) {
	const limit = 100
	for name, l := range realLimiters(t, limit, time.Minute) {
		t.Run(name, func(t *testing.T) {
			m := newTestMemory(t, l, MemoryOptions{MaxKeys: 1000})
			ctx := context.Background()

			// Keys are independent, and the limit is reached exactly.
			for _, key := range []string{"a", "b"} {
				for i := range limit {
					if d := take(t, m, key, t0); !d.Allowed {
						t.Fatalf("%s take %d denied: %+v", key, i+1, d)
					}
				}
				if d := take(t, m, key, t0); d.Allowed || d.RetryAfter <= 0 {
					t.Fatalf("%s over the limit: %+v", key, d)
				}
			}

			// Undo gives back an admitted take.
			d, _ := m.Take(ctx, "u", t0, 1)
			for range limit - 1 {
				take(t, m, "u", t0)
			}
			if err := m.Undo(ctx, "u", t0, 1, d); err != nil {
				t.Fatal(err)
			}
			if d := take(t, m, "u", t0); !d.Allowed {
				t.Fatalf("take after Undo denied: %+v", d)
			}

			// A flood of keys stays within MaxKeys; within twice it when
			// every key has a request in flight (see
			// TestMemoryKeepsKeysInFlight).
			for i := range 20_000 {
				take(t, m, fmt.Sprint("flood-", i), t0)
			}
			bound := 1000
			if m.inFlight {
				bound *= 2
			}
			if got := m.Len(); got > bound {
				t.Fatalf("Len = %d > %d", got, bound)
			}

			// Everything is idle long after the window; nothing is before.
			if n := m.Sweep(t0); n != 0 {
				t.Fatalf("Sweep at t0 dropped %d", n)
			}
			if n := m.Sweep(t0.Add(24 * time.Hour)); n == 0 || m.Len() != 0 {
				t.Fatalf("Sweep a day later dropped %d, Len %d", n, m.Len())
			}

			// Many goroutines on one key admit exactly the limit.
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 5 {
						if take(t, m, "shared", t0).Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != limit {
				t.Fatalf("%d allowed across goroutines, want %d", got, limit)
			}
		})
	}
}

// TestMemorySweepBoundedHolds sweeps 150,000 idle keys while another
// goroutine keeps adding keys: no hold of a shard's lock examines more than
// sweepBatch entries (and holds of that many happen: the shards hold more),
// every idle key is dropped in that one sweep, and no active key is, neither
// those held before the sweep nor those added during it.
func TestMemorySweepBoundedHolds(t *testing.T) {
	const idle, active, fresh = 150_000, 1000, 20_000
	m := newTestMemory(t, fakeLimiter{limit: 5, window: time.Minute}, MemoryOptions{MaxKeys: 1 << 18})
	later := t0.Add(time.Minute) // the idle keys' window is over
	// What sweeps do to each shard's lock, written under that lock: how
	// many times they held it, and the most entries one hold examined.
	holdsOf, heldMaxOf := make([]int, len(m.keys.shards)), make([]int, len(m.keys.shards))
	for i := range m.keys.shards {
		s := &m.keys.shards[i]
		s.mu.Lock()
		s.sweepHeld = func(n int) {
			holdsOf[i]++
			heldMaxOf[i] = max(heldMaxOf[i], n)
		}
		s.mu.Unlock()
	}
	for i := range idle {
		take(t, m, fmt.Sprint("idle-", i), t0)
	}
	for i := range active {
		take(t, m, fmt.Sprint("active-", i), later)
	}

	var added atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range fresh {
			select {
			case <-stop:
				return
			default:
			}
			take(t, m, fmt.Sprint("fresh-", i), later)
			added.Add(1)
		}
	})
	dropped := m.Sweep(later)
	close(stop)
	wg.Wait()

	if dropped != idle {
		t.Errorf("Sweep dropped %d keys, want the %d idle ones", dropped, idle)
	}
	if got, want := m.Len(), active+int(added.Load()); got != want {
		t.Errorf("Len = %d after the sweep, want %d (the active keys and the %d added during it)", got, want, added.Load())
	}
	holds, heldMax := 0, 0
	for i := range m.keys.shards {
		s := &m.keys.shards[i]
		s.mu.Lock()
		holds += holdsOf[i]
		heldMax = max(heldMax, heldMaxOf[i])
		s.mu.Unlock()
	}
	if heldMax != sweepBatch {
		t.Errorf("the most entries examined under one hold of a shard's lock: %d, want %d", heldMax, sweepBatch)
	}
	if minHolds := idle / sweepBatch; holds < minHolds {
		t.Errorf("the sweep held shard locks %d times, want at least %d", holds, minHolds)
	}
	// The active keys kept their state: this is their second request.
	for i := range active {
		if d := take(t, m, fmt.Sprint("active-", i), later); d.Remaining != 3 {
			t.Fatalf("active-%d: remaining %d, want 3 (state kept)", i, d.Remaining)
		}
	}
	for i := range int(added.Load()) {
		if d := take(t, m, fmt.Sprint("fresh-", i), later); d.Remaining != 3 {
			t.Fatalf("fresh-%d: remaining %d, want 3 (state kept)", i, d.Remaining)
		}
	}
	for _, k := range []string{"idle-0", fmt.Sprint("idle-", idle-1)} {
		if d := take(t, m, k, later); d.Remaining != 4 {
			t.Fatalf("%s: remaining %d, want 4 (dropped, fresh)", k, d.Remaining)
		}
	}
}

// A concurrency key with a request in flight is not evicted by a flood of
// other keys whose requests end: it stays at its limit until its lease is
// given back. Keys in flight are kept up to twice MaxKeys, no more.
func TestMemoryKeepsKeysInFlight(t *testing.T) {
	ctx := context.Background()
	l, err := algorithms.New(algorithms.Concurrency, algorithms.Config{Tiers: []algorithms.Tier{{Events: 1, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	const maxKeys = 64
	m := newTestMemory(t, l, MemoryOptions{MaxKeys: maxKeys})
	held := take(t, m, "victim", t0)
	if !held.Allowed {
		t.Fatalf("first request: %+v", held)
	}
	for i := range 10_000 {
		key := "flood-" + strconv.Itoa(i)
		d := take(t, m, key, t0)
		if err := m.Undo(ctx, key, t0, 1, d); err != nil {
			t.Fatal(err)
		}
	}
	if d := take(t, m, "victim", t0.Add(time.Second)); d.Allowed {
		t.Fatalf("a flood of other keys evicted a key in flight: a second request admitted, limit 1")
	}
	if err := m.Undo(ctx, "victim", t0.Add(time.Second), 1, held); err != nil {
		t.Fatal(err)
	}
	if d := take(t, m, "victim", t0.Add(time.Second)); !d.Allowed {
		t.Fatalf("after the release: %+v", d)
	}

	// Requests in flight on distinct keys that never end: the store grows
	// past MaxKeys to keep them, up to twice it.
	for i := range 10_000 {
		take(t, m, "held-"+strconv.Itoa(i), t0.Add(time.Second))
	}
	if n := m.Len(); n <= maxKeys || n > 2*maxKeys {
		t.Fatalf("Len %d with every key in flight, want in (%d, %d]", n, maxKeys, 2*maxKeys)
	}
}

// A new key in a full concurrency store takes over the state of the key it
// evicts when that key is idle (a flood then allocates nothing); it must
// decide as a new state would: with its full limit, under the Limiter the
// store decides under, never with another key's leases.
func TestMemoryNewKeyDecidesAsNew(t *testing.T) {
	ctx := context.Background()
	conc := func(events int64) algorithms.Limiter {
		l, err := algorithms.New(algorithms.Concurrency, algorithms.Config{Tiers: []algorithms.Tier{{Events: events, Window: time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	admits := func(s Store, key string, now time.Time) int {
		n := 0
		for range 5 {
			if d, err := s.Take(ctx, key, now, 1); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				n++
			}
		}
		return n
	}

	t.Run("evicted idle or in flight", func(t *testing.T) {
		m := newTestMemory(t, conc(2), MemoryOptions{MaxKeys: 1})
		d := take(t, m, "ended", t0)
		if err := m.Undo(ctx, "ended", t0, 1, d); err != nil {
			t.Fatal(err)
		}
		if n := admits(m, "next", t0); n != 2 { // evicts "ended", idle
			t.Fatalf("a key taking over an idle key's state: %d admitted, want 2", n)
		}
		// "next" holds two leases; a third key is kept beside it (up to
		// twice MaxKeys), a fourth evicts one in flight.
		for _, key := range []string{"third", "fourth"} {
			if n := admits(m, key, t0); n != 2 {
				t.Fatalf("%s: %d admitted, want 2 (another key's leases carried over)", key, n)
			}
		}
	})

	t.Run("under other limits", func(t *testing.T) {
		m := newTestMemory(t, conc(1), MemoryOptions{MaxKeys: 1})
		d := take(t, m, "ended", t0)
		if err := m.Undo(ctx, "ended", t0, 1, d); err != nil {
			t.Fatal(err)
		}
		u, err := m.Under(conc(3))
		if err != nil {
			t.Fatal(err)
		}
		// The first Take decides with the new state alone (a later one
		// would convert it): 3 units at once, over the old limit of 1.
		if d, err := u.Take(ctx, "next", t0, 3); err != nil || !d.Allowed {
			t.Fatalf("a new key's first request of 3 under a limit of 3: %+v, %v", d, err)
		}
	})
}
