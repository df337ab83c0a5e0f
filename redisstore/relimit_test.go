package redisstore

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest/conformance"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// relimitSeries is a set of limits one key is decided under in turn:
// alternately (step i under limits i mod n) or switching at random.
type relimitSeries struct {
	name      string
	alternate bool
	cfgs      []algorithms.Config
}

func relimitSeriesOf(alg string) []relimitSeries {
	one := func(e int64, w time.Duration) algorithms.Config {
		return algorithms.Config{Tiers: tiers(algorithms.Tier{Events: e, Window: w})}
	}
	if alg == algorithms.Concurrency {
		return []relimitSeries{
			{"100_and_1000_per_1m", true, []algorithms.Config{one(100, time.Minute), one(1000, time.Minute)}},
			{"3_10_1_per_1s_3_per_500ms", false, []algorithms.Config{one(3, sec(1)), one(10, sec(1)), one(1, sec(1)), one(3, 500*time.Millisecond)}},
		}
	}
	two := algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})}
	ss := []relimitSeries{
		{"100_and_1000_per_1m", true, []algorithms.Config{one(100, time.Minute), one(1000, time.Minute)}},
		{"raise_lower_add_remove_rewindow", false, []algorithms.Config{one(3, sec(1)), one(10, sec(1)), one(2, sec(1)), two, one(3, sec(2)), one(999, 1000001*time.Microsecond)}},
	}
	cr := relimitSeries{name: "count_rejected"}
	for _, c := range ss[1].cfgs {
		c.CountRejected = true
		cr.cfgs = append(cr.cfgs, c)
	}
	ss = append(ss, cr)
	if algorithms.UsesBurst(alg) {
		b := func(c algorithms.Config, burst int64) algorithms.Config { c.Burst = burst; return c }
		ss = append(ss, relimitSeries{"bursts", false, []algorithms.Config{b(one(10, time.Minute), 4), one(10, time.Minute), b(one(7, sec(3)), 1), b(two, 6), b(one(1e12, time.Hour), 5)}})
	}
	return ss
}

// TestConformanceRelimit: keys decided under limits that change from one
// step to the next (raised, lowered, tiers added and removed, windows and
// bursts changed) get the same decisions from the Redis store as from the
// memory store: the Lua twins convert a state saved under other limits as
// the Go twins' Relimit does.
func TestConformanceRelimit(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	for _, alg := range algorithms.Names {
		t.Run(alg, func(t *testing.T) {
			for si, ser := range relimitSeriesOf(alg) {
				t.Run(ser.name, func(t *testing.T) {
					var mems, reds []store.Store
					var merged algorithms.Config
					ref := store.NewMemory(mustLimiter(t, alg, ser.cfgs[0]), store.MemoryOptions{SweepInterval: time.Hour})
					defer ref.Destruct()
					rs := mustStore(t, c, mustLimiter(t, alg, ser.cfgs[0]), fmt.Sprintf("relimit-%s-%d-%d", alg, si, time.Now().UnixNano()))
					rs.setMargin(time.Hour)
					for _, cfg := range ser.cfgs {
						l := mustLimiter(t, alg, cfg)
						m, err := ref.Under(l)
						if err != nil {
							t.Fatal(err)
						}
						r, err := rs.Under(l)
						if err != nil {
							t.Fatal(err)
						}
						mems, reds = append(mems, m), append(reds, r)
						merged.Tiers = append(merged.Tiers, cfg.Tiers...)
						merged.Burst = max(merged.Burst, cfg.Burst)
					}
					rng := rand.New(rand.NewSource(int64(si) + 7))
					ops := conformance.Timeline(rng, alg, merged, 600)
					p := conformance.NewPlayer(ops)
					cur, switches := 0, 0
					for i := range ops {
						if ser.alternate {
							cur = i % len(mems)
						} else if rng.Float64() < 0.15 {
							cur = rng.Intn(len(mems))
							switches++
						}
						want, got, taken, err := p.Play(ctx, mems[cur], reds[cur], i)
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						if !taken {
							continue
						}
						if d := diffDecision(want, got, false); d != "" {
							t.Fatal(p.Differ(i, fmt.Sprintf(", limits %d %+v", cur, ser.cfgs[cur]), d))
						}
					}
					if p.Allowed == 0 || p.Denied == 0 || !ser.alternate && switches < 10 {
						t.Errorf("a weak timeline: %d allowed, %d denied, %d switches", p.Allowed, p.Denied, switches)
					}
				})
			}
		})
	}
}

// TestSyncKeepsCountsAcrossLimits: the two-layer store's counters in Redis
// do not depend on the events, so a store made under another limit (a
// reload) reads what the fleet counted under the old one.
func TestSyncKeepsCountsAcrossLimits(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	const W = time.Minute
	clk := new(storetest.Clock)
	base := alignedAfter(t0, W)
	clk.Set(base)
	cfg := func(e int64) algorithms.Config {
		return algorithms.Config{Tiers: []algorithms.Tier{{Events: e, Window: W}}}
	}
	for _, alg := range []string{algorithms.FixedWindow, algorithms.SlidingWindow} {
		t.Run(alg, func(t *testing.T) {
			zone := "relimit-" + alg
			old := newTestSync(t, c, alg, cfg(100), W, clk, zone)
			mustSync(t, ctx, old)
			if d, err := old.Take(ctx, "k", base, 90); err != nil || !d.Allowed {
				t.Fatalf("take 90 of 100: %+v, %v", d, err)
			}
			mustSync(t, ctx, old) // pushes the 90
			// A new instance learns the fleet's count at its first push,
			// after the key's first request.
			lower := newTestSync(t, c, alg, cfg(50), W, clk, zone)
			if d, err := lower.Take(ctx, "k", base, 1); err != nil || !d.Allowed {
				t.Fatalf("first take under 50: %+v, %v", d, err)
			}
			mustSync(t, ctx, lower) // pushes 1, reads 91
			if d, err := lower.Take(ctx, "k", base, 1); err != nil || d.Allowed || d.Limit != 50 || d.Remaining != 0 {
				t.Fatalf("91 counted, under 50: %+v, %v; want denied", d, err)
			}
			higher := newTestSync(t, c, alg, cfg(1000), W, clk, zone)
			higher.Take(ctx, "k", base, 1)
			mustSync(t, ctx, higher) // pushes 1, reads 92
			if d, err := higher.Take(ctx, "k", base, 1); err != nil || !d.Allowed || d.Remaining != 1000-93 {
				t.Fatalf("92 counted, under 1000: %+v, %v; want %d left", d, err, 1000-93)
			}
		})
	}
}
