package algorithms

import (
	"testing"
	"time"
)

// moreStep is a Take at winT0+at and what its decision must say of the
// tier it reports.
type moreStep struct {
	at          time.Duration
	cost        int64
	allowed     bool
	tier        int
	rem         int64
	reset, more time.Duration
}

// TestMoreAfter checks Decision.MoreAfter on synthetic instants: how long
// until the reported tier admits one unit more than Remaining, which with
// a sliding window or a bucket comes long before the tier is whole
// (ResetAfter).
func TestMoreAfter(t *testing.T) {
	ms, us, sec := winTms, bktTus, time.Second
	cases := []struct {
		name, alg string
		cfg       Config
		steps     []moreStep
	}{
		{"sliding_log: the oldest unit leaves first", SlidingLog, Config{Tiers: []Tier{{3, sec}}}, []moreStep{
			{at: 0, cost: 1, allowed: true, rem: 2, reset: sec, more: sec},
			{at: 300 * ms, cost: 1, allowed: true, rem: 1, reset: sec, more: 700 * ms},
			{at: 600 * ms, cost: 1, allowed: true, rem: 0, reset: sec, more: 400 * ms},
			{at: 700 * ms, cost: 1, rem: 0, reset: 900 * ms, more: 300 * ms},
			{at: 1000 * ms, cost: 0, allowed: true, rem: 1, reset: 600 * ms, more: 300 * ms},
			{at: 5 * sec, cost: 0, allowed: true, rem: 3, reset: 0, more: 0},
		}},
		{"sliding_log: two tiers, the reported one", SlidingLog, Config{Tiers: []Tier{{2, sec}, {3, 10 * sec}}}, []moreStep{
			{at: 0, cost: 1, allowed: true, tier: 0, rem: 1, reset: sec, more: sec},
			{at: 500 * ms, cost: 1, allowed: true, tier: 0, rem: 0, reset: sec, more: 500 * ms},
			{at: 1500 * ms, cost: 1, allowed: true, tier: 1, rem: 0, reset: 10 * sec, more: 8500 * ms},
		}},
		// Tiers tied in remaining: the one that refuses one unit more
		// the longest is reported, or MoreAfter would be early.
		{"sliding_log: tied tiers, the longer wait", SlidingLog, Config{Tiers: []Tier{{3, 3 * sec}, {3, 12 * sec}}}, []moreStep{
			{at: 0, cost: 1, allowed: true, tier: 1, rem: 2, reset: 12 * sec, more: 12 * sec},
			{at: 3 * sec, cost: 0, allowed: true, tier: 1, rem: 2, reset: 9 * sec, more: 9 * sec},
		}},
		{"sliding_window: tied tiers, the longer wait", SlidingWindow, Config{Tiers: []Tier{{3, 3 * sec}, {3, 12 * sec}}}, []moreStep{
			// 3 more units pass in the 12s tier once its previous
			// window has faded out: 24s after the window's start (winT0
			// is 8s into a 12s window, 2s into a 3s one).
			{at: 4 * sec, cost: 1, allowed: true, tier: 1, rem: 2, reset: 24 * sec, more: 24 * sec},
		}},
		{"fixed_window: tied tiers, the longer wait", FixedWindow, Config{Tiers: []Tier{{3, 3 * sec}, {3, 12 * sec}}}, []moreStep{
			{at: 4 * sec, cost: 1, allowed: true, tier: 1, rem: 2, reset: 12 * sec, more: 12 * sec},
		}},
		{"token_bucket: tied tiers, the slower refill", TokenBucket, Config{Tiers: []Tier{{3, 6 * sec}, {3, 30 * sec}}}, []moreStep{
			{at: 0, cost: 1, allowed: true, tier: 1, rem: 2, reset: 10 * sec, more: 10 * sec},
		}},
		{"sliding_window: the previous window fades", SlidingWindow, Config{Tiers: []Tier{{10, sec}}}, []moreStep{
			{at: 0, cost: 10, allowed: true, rem: 0, reset: 2 * sec, more: sec + 100*ms},
			// 10 x (1 - 0.25) = 7.5 -> 2 left; 3 once the weight is 7 or less
			// (at 1.3s), the whole tier at 2s.
			{at: 1250 * ms, cost: 0, allowed: true, rem: 2, reset: 750 * ms, more: 50 * ms},
			{at: 1250 * ms, cost: 3, rem: 2, reset: 750 * ms, more: 50 * ms},
		}},
		{"fixed_window: nothing before the window ends", FixedWindow, Config{Tiers: []Tier{{3, sec}}}, []moreStep{
			{at: 200 * ms, cost: 2, allowed: true, rem: 1, reset: 800 * ms, more: 800 * ms},
			{at: 1000 * ms, cost: 0, allowed: true, rem: 3, reset: 0, more: 0},
		}},
		{"token_bucket: one token a second", TokenBucket, Config{Tiers: []Tier{{10, 10 * sec}}}, []moreStep{
			{at: 0, cost: 3, allowed: true, rem: 7, reset: 3 * sec, more: sec},
			{at: 500 * ms, cost: 0, allowed: true, rem: 7, reset: 2500 * ms, more: 500 * ms},
			{at: 500 * ms, cost: 8, rem: 7, reset: 2500 * ms, more: 500 * ms},
			{at: 3 * sec, cost: 0, allowed: true, rem: 10, reset: 0, more: 0},
		}},
		{"token_bucket: count_rejected below zero", TokenBucket, Config{Tiers: []Tier{{2, 2 * sec}}, CountRejected: true}, []moreStep{
			{at: 0, cost: 2, allowed: true, rem: 0, reset: 2 * sec, more: sec},
			{at: 0, cost: 2, rem: 0, reset: 4 * sec, more: 3 * sec},
		}},
		{"leaky_bucket: room for one more", LeakyBucket, Config{Tiers: []Tier{{10, 10 * sec}}, Burst: 4}, []moreStep{
			{at: 0, cost: 4, allowed: true, rem: 0, reset: 4 * sec, more: sec},
			{at: 1500 * ms, cost: 0, allowed: true, rem: 1, reset: 2500 * ms, more: 500 * ms},
		}},
		{"gcra: the next emission", GCRA, Config{Tiers: []Tier{{3, sec}}}, []moreStep{
			{at: 0, cost: 3, allowed: true, rem: 0, reset: 1000002 * us, more: 333334 * us},
			{at: 100 * ms, cost: 0, allowed: true, rem: 0, reset: 900002 * us, more: 233334 * us},
		}},
		{"concurrency: the oldest lease, at most a second", Concurrency, Config{Tiers: []Tier{{2, 10 * sec}}}, []moreStep{
			{at: 0, cost: 0, allowed: true, rem: 2, reset: 0, more: 0},
			{at: 0, cost: 1, allowed: true, rem: 1, reset: 10 * sec, more: sec},
			{at: 9500 * ms, cost: 1, allowed: true, rem: 0, reset: 10 * sec, more: 500 * ms},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := winTNew(t, c.alg, c.cfg).NewState()
			for i, s := range c.steps {
				d := st.Take(winT0.Add(s.at), s.cost)
				if d.Allowed != s.allowed || d.Tier != s.tier || d.Remaining != s.rem || d.ResetAfter != s.reset || d.MoreAfter != s.more {
					t.Errorf("step %d (at %v cost %d): got %+v\n want allowed %v tier %d remaining %d reset %v more %v",
						i, s.at, s.cost, d, s.allowed, s.tier, s.rem, s.reset, s.more)
				}
			}
		})
	}
}

// TestBktMoreAfter checks on random timelines of the buckets (one tier)
// that Remaining+1 units are admitted at exactly MoreAfter and not one µs
// earlier, and that MoreAfter is zero exactly when the bucket is whole.
func TestBktMoreAfter(t *testing.T) {
	for i, name := range []string{TokenBucket, LeakyBucket, GCRA} {
		checked := 0
		bktTWalk(t, name, int64(10+i), func(cfg Config, l Limiter, ops []bktTOp, seen, cost int64, d Decision, where string) {
			if (d.MoreAfter == 0) != (d.Remaining == d.Limit) || d.MoreAfter > d.ResetAfter || d.MoreAfter%bktTus != 0 {
				t.Fatalf("%s: MoreAfter inconsistent with Remaining or ResetAfter", where)
			}
			if len(cfg.Tiers) != 1 || d.MoreAfter == 0 {
				return
			}
			checked++
			bktTFirstAt(t, l, ops, seen+int64(d.MoreAfter/bktTus), d.Remaining+1, where, "MoreAfter")
		})
		if checked < 100 {
			t.Fatalf("%s: only %d decisions checked", name, checked)
		}
	}
}
