package algorithms

import (
	"testing"
	"time"
)

func TestBktLeakyBucket(t *testing.T) {
	sec, ms, us := time.Second, bktTms, bktTus
	five := Config{Tiers: []Tier{{5, sec}}}
	allow := func(tier int, limit, rem int64, reset, delay time.Duration) Decision {
		return bktTDelay(bktTAllow(tier, limit, rem, reset), delay)
	}
	cases := []bktTCase{
		{"five per second", five, []bktTStep{
			{op: "idle"},
			{cost: 1, want: allow(0, 5, 4, 200*ms, 0)},
			{cost: 1, want: allow(0, 5, 3, 400*ms, 200*ms)},
			{cost: 1, want: allow(0, 5, 2, 600*ms, 400*ms)},
			{cost: 1, want: allow(0, 5, 1, 800*ms, 600*ms)},
			{cost: 1, want: allow(0, 5, 0, sec, 800*ms)},
			{cost: 1, want: bktTDeny(0, 5, 0, sec, 200*ms)},
			{op: "busy"},
			{at: 200*ms - us, cost: 1, want: bktTDeny(0, 5, 0, 800*ms+us, us)},
			{at: 200 * ms, cost: 1, want: allow(0, 5, 0, sec, 800*ms)},
			{at: 1200*ms - us, op: "busy"},
			{at: 1200 * ms, op: "idle"},
			{at: 10 * sec, cost: 1, want: allow(0, 5, 4, 200*ms, 0)},
		}},
		{"burst above events", Config{Tiers: []Tier{{5, sec}}, Burst: 10}, []bktTStep{
			{cost: 10, want: allow(0, 10, 0, 2*sec, 0)},
			{cost: 1, want: bktTDeny(0, 10, 0, 2*sec, 200*ms)},
			{at: sec, cost: 5, want: allow(0, 10, 0, 2*sec, sec)},
		}},
		{"cost above one", five, []bktTStep{
			{cost: 3, want: allow(0, 5, 2, 600*ms, 0)},
			{cost: 3, want: bktTDeny(0, 5, 2, 600*ms, 200*ms)},
			{cost: 2, want: allow(0, 5, 0, sec, 600*ms)},
		}},
		{"cost above capacity", five, []bktTStep{
			{cost: 6, want: bktTDeny(0, 5, 5, 0, sec)},
			{cost: 1 << 62, want: bktTDeny(0, 5, 5, 0, sec)},
			{op: "idle"},
		}},
		{"tiers", Config{Tiers: []Tier{{2, sec}, {3, 10 * sec}}}, []bktTStep{
			{cost: 1, want: allow(0, 2, 1, 500*ms, 0)},
			// held until both tiers' water has leaked: 1/3 of 10s.
			{cost: 1, want: allow(0, 2, 0, sec, 3333334*us)},
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{at: sec, cost: 1, want: allow(1, 3, 0, 9*sec, 5666667*us)},
			{at: sec, cost: 1, want: bktTDeny(1, 3, 0, 9*sec, 2333334*us)},
			{at: sec + 2333334*us, cost: 1, want: allow(1, 3, 0, 10*sec, 6666666*us)},
		}},
		{"undo", Config{Tiers: []Tier{{2, sec}}}, []bktTStep{
			{cost: 1, want: allow(0, 2, 1, 500*ms, 0)},
			{cost: 1, want: allow(0, 2, 0, sec, 500*ms)},
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{op: "undo", cost: 1, ref: 2}, // denied: nothing to give back
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{op: "undo", cost: 1, ref: 1},
			{cost: 1, want: allow(0, 2, 0, sec, 500*ms)},
			{at: 400 * ms, op: "undo", cost: 1, ref: 6},
			{at: 400 * ms, cost: 0, want: allow(0, 2, 1, 100*ms, 100*ms)},
			{at: 2 * sec, op: "undo", cost: 1, ref: 0}, // already empty
			{at: 2 * sec, op: "idle"},
			{at: 2 * sec, cost: 2, want: allow(0, 2, 0, sec, 0)},
		}},
		{"a billion per second", Config{Tiers: []Tier{{1e9, sec}}}, []bktTStep{
			{cost: 1e9, want: allow(0, 1e9, 0, sec, 0)},
			{cost: 1, want: bktTDeny(0, 1e9, 0, sec, us)},
			{at: us, cost: 1000, want: allow(0, 1e9, 0, sec, 999999*us)},
		}},
	}
	bktTRunCases(t, LeakyBucket, append(cases, bktTBackwards, bktTCountRejected))
}

// TestBktLeakyBucketShaping: requests held for Delay leave evenly spaced.
func TestBktLeakyBucketShaping(t *testing.T) {
	s := bktTNew(t, LeakyBucket, Config{Tiers: []Tier{{4, time.Second}}, Burst: 100}).NewState()
	for i := 0; i < 20; i++ {
		d := s.Take(bktT0, 1)
		if !d.Allowed || d.Delay != time.Duration(i)*250*time.Millisecond {
			t.Fatalf("request %d: %+v, want Delay %v", i, d, time.Duration(i)*250*time.Millisecond)
		}
	}
}

func TestBktLeakyBucketRetryAfter(t *testing.T) { bktTRetryProperty(t, LeakyBucket, 3) }

func BenchmarkBktLeakyBucket(b *testing.B) {
	bktTBenchTiers(b, LeakyBucket, Tier{1e9, time.Second}, Tier{1e8, time.Minute}, Tier{1e9, time.Hour})
}
