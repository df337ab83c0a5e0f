package algorithms

import (
	"testing"
	"time"
)

// TestPeek checks every algorithm's Peek against Take: the tier a Take of
// cost 0 describes is one of Peek's, with the fewest remaining, and a
// state peeked at (even at an earlier instant) decides as one never
// peeked at.
func TestPeek(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Tiers: []Tier{{Events: 5, Window: 10 * time.Second}, {Events: 8, Window: time.Minute}}}
			if name == Concurrency {
				cfg.Tiers = cfg.Tiers[:1]
			}
			l, err := New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			peeked, plain := l.NewState(), l.NewState()
			p := peeked.(Peeker)

			got := p.Peek(t0)
			for i, ts := range got {
				if ts.Remaining != ts.Limit || ts.ResetAfter != 0 {
					t.Fatalf("new state, tier %d: %+v, want whole", i, ts)
				}
			}
			if len(got) != len(cfg.Tiers) {
				t.Fatalf("Peek reports %d tiers, want %d", len(got), len(cfg.Tiers))
			}

			steps := []time.Duration{0, 0, time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second, 11 * time.Second, 12 * time.Second}
			for k, off := range steps {
				at := t0.Add(off)
				d1 := peeked.Take(at, 1)
				d2 := plain.Take(at, 1)
				if d1 != d2 {
					t.Fatalf("step %d: peeked state decided %+v, unpeeked %+v", k, d1, d2)
				}
				// Peek now, a little later and earlier (time going back).
				for _, dt := range []time.Duration{0, 500 * time.Millisecond, -time.Second} {
					tiers := p.Peek(at.Add(dt))
					if dt != 0 {
						continue
					}
					// A Take of cost 0 on the unpeeked twin describes a
					// tier with the fewest remaining.
					d := plain.Take(at, 0)
					want := tiers[0]
					if d.Tier >= 0 && d.Tier < len(tiers) {
						want = tiers[d.Tier]
					}
					for i := range tiers {
						if tiers[i].Remaining < want.Remaining {
							t.Fatalf("step %d: Take(0) described tier %d, %+v, but tier %d has fewer remaining: %+v", k, d.Tier, want, i, tiers[i])
						}
					}
					if d.Allowed && (d.Limit != want.Limit || d.Remaining != want.Remaining || d.ResetAfter != want.ResetAfter) {
						t.Fatalf("step %d: Peek %+v, Take(0) %+v", k, tiers, d)
					}
					if !d.Allowed && want.Remaining != 0 {
						t.Fatalf("step %d: Take(0) denied, Peek %+v", k, tiers)
					}
				}
				peeked.Take(at, 0) // keep the twins in step
			}

			// Used units show in every tier.
			tiers := p.Peek(t0.Add(12 * time.Second))
			if name != Concurrency && tiers[1].Remaining >= tiers[1].Limit {
				t.Errorf("tier 2 after 8 requests: %+v, want units used", tiers[1])
			}
		})
	}
}
