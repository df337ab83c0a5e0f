package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// boundsClient is a client whose calls give up after a few seconds: a
// script that never ends (Redis answers BUSY to everyone) fails the test
// instead of hanging it.
func boundsClient(t *testing.T) *redis.Client {
	_, c := newClient(t)
	c2 := redis.NewClient(&redis.Options{Addr: c.Options().Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { c2.Close() })
	return c2
}

// boundsConfigs are configurations at the bounds the configuration
// accepts (algorithms.MaxCount, algorithms.MaxWindow); each algorithm
// plays those it accepts.
func boundsConfigs() []algorithms.Config {
	M, W := algorithms.MaxCount, algorithms.MaxWindow
	return []algorithms.Config{
		{Tiers: tiers(algorithms.Tier{Events: M, Window: W})},
		{Tiers: tiers(algorithms.Tier{Events: 1, Window: W})},
		{Tiers: tiers(algorithms.Tier{Events: 3, Window: W}, algorithms.Tier{Events: M, Window: time.Millisecond})},
		{CountRejected: true, Tiers: tiers(algorithms.Tier{Events: M, Window: W}, algorithms.Tier{Events: 5, Window: time.Millisecond})},
		{CountRejected: true, Tiers: tiers(algorithms.Tier{Events: M, Window: time.Second})},
		{Burst: 1, Tiers: tiers(algorithms.Tier{Events: M, Window: W})},
		{Burst: M, Tiers: tiers(algorithms.Tier{Events: M, Window: W})},
		{Burst: M, CountRejected: true, Tiers: tiers(algorithms.Tier{Events: 1 << 20, Window: W})},
		{Burst: 1 << 40, CountRejected: true, Tiers: tiers(algorithms.Tier{Events: 1 << 40, Window: time.Second}, algorithms.Tier{Events: 3, Window: W})},
		{Tiers: tiers(algorithms.Tier{Events: M, Window: 1 << 20 * time.Microsecond})},
	}
}

// TestBoundsLargestValues plays timelines with the largest accepted
// events, burst, windows and costs (and costs far beyond, as a request may
// send) against the memory and the Redis store: every script must end and
// both must decide alike, to the microsecond.
func TestBoundsLargestValues(t *testing.T) {
	c := boundsClient(t)
	ctx := context.Background()
	M := algorithms.MaxCount
	for _, alg := range algorithms.Names {
		played, allowed, denied := 0, 0, 0
		for ci, cfg := range boundsConfigs() {
			if !algorithms.UsesBurst(alg) && cfg.Burst != 0 {
				continue
			}
			l, err := algorithms.New(alg, cfg)
			if err != nil {
				continue // beyond what this algorithm takes (validate refuses it too)
			}
			played++
			t.Run(fmt.Sprintf("%s/%d", alg, ci), func(t *testing.T) {
				rs := mustStore(t, c, l, fmt.Sprintf("bounds-%s-%d", alg, ci))
				rs.setMargin(time.Hour)
				ref := l.NewState()
				rng := rand.New(rand.NewSource(int64(ci)))
				costs := []int64{1, 2, 3, M / 3, M / 2, M - 1, M, M + 1, 2 * M, 3 * M, math.MaxInt64}
				var decs []algorithms.Decision
				var toks []uint64 // the Redis store's tokens of decs
				var costOf []int64
				at := time.Duration(0)
				for i := 0; i < 80; i++ {
					w := cfg.Tiers[rng.Intn(len(cfg.Tiers))].Window
					switch r := rng.Intn(10); {
					case r < 3: // same instant
					case r < 5:
						at += time.Microsecond
					case r < 7:
						at += time.Duration(rng.Int63n(int64(w)/3 + 1))
					case r < 8:
						at += w - time.Microsecond
					case r < 9:
						at -= time.Duration(rng.Int63n(int64(w)/2 + 1)) // backwards
					default:
						at += w + time.Microsecond
					}
					at = min(at, 3*algorithms.MaxWindow) // instants stay within the next 30 years
					now := t0.Add(at)
					if len(decs) > 0 && rng.Intn(6) == 0 {
						j := rng.Intn(len(decs))
						if decs[j].Allowed {
							ref.Undo(now, costOf[j], decs[j])
							if err := rs.Undo(ctx, "k", now, costOf[j], withToken(decs[j], toks[j])); err != nil {
								t.Fatalf("step %d: Undo: %v", i, err)
							}
							decs[j].Allowed = false // undone once
							continue
						}
					}
					cost := costs[rng.Intn(len(costs))]
					want := ref.Take(now, cost)
					got, err := rs.Take(ctx, "k", now, cost)
					if err != nil {
						t.Fatalf("step %d (cost %d): Take: %v", i, cost, err)
					}
					if d := diffDecision(want, got, true); d != "" {
						t.Fatalf("step %d (at t0%+v cost %d): decisions differ:%s", i, at, cost, d)
					}
					if got.Remaining < 0 || got.Remaining > got.Limit || got.ResetAfter < 0 || got.RetryAfter < 0 {
						t.Fatalf("step %d: malformed decision %+v", i, got)
					}
					if got.Allowed {
						allowed++
					} else {
						denied++
					}
					decs, toks, costOf = append(decs, want), append(toks, got.Token), append(costOf, cost)
				}
			})
		}
		// (One configuration may only deny: count_rejected with a cost
		// above a 10-year limit fills it for good.)
		if allowed == 0 || denied == 0 {
			t.Errorf("%s: weak timelines: %d allowed, %d denied", alg, allowed, denied)
		}
		if played < 2 {
			t.Errorf("%s: only %d of the configurations at the bounds accepted", alg, played)
		}
	}
}

// withToken returns d with token: the Redis store's own for d's lease.
func withToken(d algorithms.Decision, token uint64) algorithms.Decision {
	d.Token = token
	return d
}

// unchecked is a Limiter that algorithms.New did not build: its Config is
// whatever it was given.
type unchecked struct {
	algorithms.Limiter
	cfg algorithms.Config
}

func (l unchecked) Config() algorithms.Config { return l.cfg }

// TestBoundsRefused: the Redis store refuses a Limiter just beyond the
// bounds, which algorithms.New (and so the configuration's Validate, with
// the line) refuses first.
func TestBoundsRefused(t *testing.T) {
	_, c := newClient(t)
	M, W := algorithms.MaxCount, algorithms.MaxWindow
	one := algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 1, Window: time.Second})}
	for _, alg := range algorithms.Names {
		beyond := []algorithms.Config{
			{Tiers: tiers(algorithms.Tier{Events: M + 1, Window: time.Second})},
			{Tiers: tiers(algorithms.Tier{Events: 1, Window: W + time.Microsecond})},
			{Tiers: tiers(algorithms.Tier{Events: 1, Window: 104300 * 24 * time.Hour})},
		}
		if algorithms.UsesBurst(alg) {
			beyond = append(beyond, algorithms.Config{Burst: M + 1, Tiers: one.Tiers})
		}
		for _, cfg := range beyond {
			if _, err := algorithms.New(alg, cfg); err == nil {
				t.Errorf("%s: algorithms.New accepted %+v", alg, cfg)
			}
			l := unchecked{mustLimiter(t, alg, one), cfg}
			if _, err := NewStore(c, l, Options{Zone: "z"}); err == nil {
				t.Errorf("%s: NewStore accepted %+v", alg, cfg)
			}
		}
		// At each bound: taken (a bucket of M events refills too fast for
		// its own rule, checked by the store's table of algorithms).
		atBounds := []algorithms.Config{{Tiers: tiers(algorithms.Tier{Events: 1, Window: W})}}
		if !algorithms.UsesBurst(alg) {
			atBounds = append(atBounds, algorithms.Config{Tiers: tiers(algorithms.Tier{Events: M, Window: time.Second})})
		}
		for _, cfg := range atBounds {
			if _, err := NewStore(c, mustLimiter(t, alg, cfg), Options{Zone: "z"}); err != nil {
				t.Errorf("%s: NewStore refused %+v: %v", alg, cfg, err)
			}
		}
	}
}

// slState reads a sliding_log state key: the latest instant, then per tier
// the live units and the newest offset.
func slState(t *testing.T, c *redis.Client, key string) []int64 {
	t.Helper()
	s, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v []int64
	for _, f := range strings.Fields(s) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		v = append(v, n)
	}
	return v
}

// TestSlidingLogOffsetsRebase logs far more than 2^53 units into one key
// while it is never empty: the offsets are lowered on the way and every
// score stays exact, with the same decisions as the Go twin.
func TestSlidingLogOffsetsRebase(t *testing.T) {
	c := boundsClient(t)
	ctx := context.Background()
	M := algorithms.MaxCount
	l := mustLimiter(t, algorithms.SlidingLog, algorithms.Config{Tiers: tiers(algorithms.Tier{Events: M, Window: time.Second})})
	rs := mustStore(t, c, l, "rebase")
	rs.setMargin(time.Hour)
	ref := l.NewState()
	var logged, lowered int64
	prevC := int64(0)
	for i := 0; i < 60; i++ {
		now := t0.Add(time.Duration(i) * 300 * time.Millisecond)
		cost := M/4 + int64(i)
		want := ref.Take(now, cost)
		got, err := rs.Take(ctx, "k", now, cost)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffDecision(want, got, true); d != "" {
			t.Fatalf("step %d: decisions differ:%s", i, d)
		}
		st := slState(t, c, rs.Keys("k")[0])
		count, C := st[1], st[2]
		if got.Allowed {
			logged += cost
			if C < prevC+cost {
				lowered++
			}
		}
		if count == 0 || C > 1<<52 || C < count {
			t.Fatalf("step %d: count %d, offset %d", i, count, C)
		}
		// Every score is an exact integer: the newest run ends at C.
		top, err := c.ZRangeWithScores(ctx, rs.Keys("k")[1], -1, -1).Result()
		if err != nil || len(top) != 1 || top[0].Score != float64(C) {
			t.Fatalf("step %d: newest run %+v (%v), want scored %d", i, top, err, C)
		}
		prevC = C
	}
	if logged <= 1<<53 || lowered == 0 {
		t.Fatalf("logged %d units, offsets lowered %d times: the test does not reach a rebase", logged, lowered)
	}
}

// TestSlidingLogStateEvicted: when the state key is lost but the runs
// survive, the next call counts the live units from the oldest and the
// newest run alone (after count_rejected cut a run and an undo cut
// another) and decides as with the state.
func TestSlidingLogStateEvicted(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	l := mustLimiter(t, algorithms.SlidingLog, algorithms.Config{CountRejected: true, Tiers: tiers(
		algorithms.Tier{Events: 10, Window: time.Minute}, algorithms.Tier{Events: 20, Window: time.Hour})})
	kept := mustStore(t, c, l, "evict-kept")
	lost := mustStore(t, c, l, "evict-lost")
	kept.setMargin(time.Hour)
	lost.setMargin(time.Hour)
	steps := []struct {
		at   time.Duration
		cost int64
	}{{0, 3}, {time.Second, 4}, {2 * time.Second, 2}, {3 * time.Second, 6}, {4 * time.Second, 2}}
	for _, s := range steps {
		for _, st := range []*Store{kept, lost} {
			d, err := st.Take(ctx, "k", t0.Add(s.at), s.cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed && s.cost == 2 {
				if err := st.Undo(ctx, "k", t0.Add(s.at), 1, d); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := c.Del(ctx, lost.Keys("k")[0]).Err(); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(5 * time.Second)
	want, err := kept.Take(ctx, "k", now, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := lost.Take(ctx, "k", now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffDecision(want, got, true); d != "" {
		t.Fatalf("after the state was lost:%s", d)
	}
	if a, b := slState(t, c, kept.Keys("k")[0]), slState(t, c, lost.Keys("k")[0]); a[1] != b[1] || a[3] != b[3] {
		t.Fatalf("counts differ: kept %v, lost %v", a, b)
	}
}
