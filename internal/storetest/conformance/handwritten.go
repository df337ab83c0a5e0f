package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// RunHandwritten plays short timelines written out by hand through the
// store tg makes and the algorithm's Go State, so that the basic shapes
// (fill, deny, refill, same instant, time backwards, long gap, undo) are
// covered whatever the random ones draw.
func RunHandwritten(t *testing.T, tg Target) {
	ctx := context.Background()
	ms := time.Millisecond
	timelines := [][]Op{
		// Fill 3/1s in one microsecond, deny, step back, then a long gap.
		{{0, "k", 1, 0}, {0, "k", 1, 0}, {0, "k", 1, 0}, {0, "k", 1, 0}, {-500 * ms, "k", 1, 0},
			{999 * ms, "k", 1, 0}, {1000 * ms, "k", 1, 0}, {1001 * ms, "k", 2, 0}, {5 * sec(60), "k", 1, 0}},
		// Costs: 2, more than any limit, 0, undo.
		{{0, "k", 2, 0}, {ms, "k", 100, 0}, {2 * ms, "k", 0, 0}, {3 * ms, "k", 1, 0}, {4 * ms, "k", 1, 0},
			{5 * ms, "k", 2, 1}, {6 * ms, "k", 2, 0}, {7 * ms, "k", 1, 0}, {8 * ms, "k", 1, 5}, {9 * ms, "k", 1, 0}},
		// Steady drip at the rate, then a burst.
		{{0, "k", 1, 0}, {333 * ms, "k", 1, 0}, {666 * ms, "k", 1, 0}, {999 * ms, "k", 1, 0}, {1333 * ms, "k", 1, 0},
			{1334 * ms, "k", 1, 0}, {1335 * ms, "k", 1, 0}, {1336 * ms, "k", 1, 0}, {1337 * ms, "k", 1, 0}},
	}
	cfgs := []algorithms.Config{
		{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)})},
		{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})},
		{CountRejected: true, Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})},
	}
	for _, alg := range algorithms.Names {
		for ci, cfg := range cfgs {
			l, err := algorithms.New(alg, cfg)
			if err != nil {
				continue
			}
			for ti, ops := range timelines {
				s := tg.New(t, l, fmt.Sprintf("hand-%s-%d-%d", alg, ci, ti))
				st := l.NewState()
				decs := make([]algorithms.Decision, len(ops))
				toks := make([]uint64, len(ops))
				for i, o := range ops {
					now := t0.Add(o.At)
					if o.Undo > 0 {
						d := decs[o.Undo-1]
						if !d.Allowed {
							continue
						}
						st.Undo(now, o.Cost, d)
						if err := s.Undo(ctx, o.Key, now, o.Cost, withToken(d, toks[o.Undo-1])); err != nil {
							t.Fatal(err)
						}
						continue
					}
					want := st.Take(now, o.Cost)
					got, err := s.Take(ctx, o.Key, now, o.Cost)
					if err != nil {
						t.Fatal(err)
					}
					decs[i], toks[i] = want, got.Token
					if d := Diff(want, got, false, tg.Name); d != "" {
						t.Errorf("%s cfg %d timeline %d step %d: decisions differ:%s\n%s", alg, ci, ti, i, d, history(ops[:i+1], decs))
						break
					}
				}
			}
		}
	}
}
