package algorithms

import (
	"testing"
	"time"
)

func TestBktGCRA(t *testing.T) {
	sec, ms, us := time.Second, bktTms, bktTus
	five := Config{Tiers: []Tier{{5, sec}}}
	cases := []struct {
		name  string
		cfg   Config
		steps []bktTStep
	}{
		{"five per second", five, []bktTStep{
			{op: "idle"},
			{cost: 1, want: bktTAllow(0, 5, 4, 200*ms)},
			{cost: 1, want: bktTAllow(0, 5, 3, 400*ms)},
			{cost: 1, want: bktTAllow(0, 5, 2, 600*ms)},
			{cost: 1, want: bktTAllow(0, 5, 1, 800*ms)},
			{cost: 1, want: bktTAllow(0, 5, 0, sec)},
			{cost: 1, want: bktTDeny(0, 5, 0, sec, 200*ms)},
			{op: "busy"},
			{at: 200*ms - us, cost: 1, want: bktTDeny(0, 5, 0, 800*ms+us, us)},
			{at: 200 * ms, cost: 1, want: bktTAllow(0, 5, 0, sec)},
			{at: 500 * ms, cost: 1, want: bktTAllow(0, 5, 0, 900*ms)},
			{at: 1400*ms - us, op: "busy"},
			{at: 1400 * ms, op: "idle"},
			{at: 10 * sec, cost: 1, want: bktTAllow(0, 5, 4, 200*ms)},
		}},
		{"window not a multiple of events: interval rounded up", Config{Tiers: []Tier{{3, sec}}}, []bktTStep{
			{cost: 3, want: bktTAllow(0, 3, 0, 1000002*us)},
			{cost: 1, want: bktTDeny(0, 3, 0, 1000002*us, 333334*us)},
			{at: 333334 * us, cost: 1, want: bktTAllow(0, 3, 0, 1000002*us)},
		}},
		{"burst above events", Config{Tiers: []Tier{{5, sec}}, Burst: 10}, []bktTStep{
			{cost: 10, want: bktTAllow(0, 10, 0, 2*sec)},
			{cost: 1, want: bktTDeny(0, 10, 0, 2*sec, 200*ms)},
			{at: sec, cost: 5, want: bktTAllow(0, 10, 0, 2*sec)},
		}},
		{"burst below events", Config{Tiers: []Tier{{10, sec}}, Burst: 2}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 2, 1, 100*ms)},
			{cost: 1, want: bktTAllow(0, 2, 0, 200*ms)},
			{cost: 1, want: bktTDeny(0, 2, 0, 200*ms, 100*ms)},
			{at: 150 * ms, cost: 1, want: bktTAllow(0, 2, 0, 150*ms)},
		}},
		{"cost above one", five, []bktTStep{
			{cost: 3, want: bktTAllow(0, 5, 2, 600*ms)},
			{cost: 3, want: bktTDeny(0, 5, 2, 600*ms, 200*ms)},
			{cost: 2, want: bktTAllow(0, 5, 0, sec)},
			{at: 100 * ms, cost: 0, want: bktTAllow(0, 5, 0, 900*ms)},
		}},
		{"cost above capacity", five, []bktTStep{
			{cost: 6, want: bktTDeny(0, 5, 5, 0, sec)},
			{cost: 1 << 62, want: bktTDeny(0, 5, 5, 0, sec)},
			{op: "idle"},
		}},
		{"tiers", Config{Tiers: []Tier{{2, sec}, {3, 10 * sec}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 2, 1, 500*ms)},
			{cost: 1, want: bktTAllow(0, 2, 0, sec)},
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{at: sec, cost: 1, want: bktTAllow(1, 3, 0, 9000002*us)},
			{at: sec, cost: 1, want: bktTDeny(1, 3, 0, 9000002*us, 2333334*us)},
			{at: sec + 2333333*us, cost: 1, want: bktTDeny(1, 3, 0, 6666669*us, us)},
			{at: sec + 2333334*us, cost: 1, want: bktTAllow(1, 3, 0, 10000002*us)},
		}},
		{"count rejected", Config{Tiers: []Tier{{1, sec}}, CountRejected: true}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{cost: 1, want: bktTDeny(0, 1, 0, 2*sec, 2*sec)},
			{cost: 1, want: bktTDeny(0, 1, 0, 2*sec, 2*sec)}, // TAT clamped at now + 2 tau
			{cost: 0, want: bktTDeny(0, 1, 0, 2*sec, sec)},
			{at: 2*sec - us, op: "busy"},
			{at: 2 * sec, cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{at: 3 * sec, cost: 9, want: bktTDeny(0, 1, 0, 2*sec, sec)},
		}},
		{"count rejected, tiers", Config{Tiers: []Tier{{1, sec}, {10, sec}}, CountRejected: true}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{cost: 1, want: bktTDeny(0, 1, 0, 2*sec, 2*sec)},
			{at: 2 * sec, cost: 1, want: bktTAllow(0, 1, 0, sec)},
		}},
		{"time going backwards", Config{Tiers: []Tier{{1, sec}}}, []bktTStep{
			{at: 10 * sec, cost: 1, want: bktTAllow(0, 1, 0, sec)},
			{at: 0, cost: 1, want: bktTDeny(0, 1, 0, sec, sec)},
			{at: 9 * sec, op: "busy"},
			{at: 10*sec + 500*ms, cost: 1, want: bktTDeny(0, 1, 0, 500*ms, 500*ms)},
			{at: 10 * sec, cost: 1, want: bktTDeny(0, 1, 0, 500*ms, 500*ms)},
			{at: 11 * sec, cost: 1, want: bktTAllow(0, 1, 0, sec)},
		}},
		{"undo", Config{Tiers: []Tier{{2, sec}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 2, 1, 500*ms)},
			{cost: 1, want: bktTAllow(0, 2, 0, sec)},
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{op: "undo", cost: 1, ref: 2}, // denied: nothing to give back
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*ms)},
			{op: "undo", cost: 1, ref: 1},
			{cost: 1, want: bktTAllow(0, 2, 0, sec)},
			{at: 400 * ms, op: "undo", cost: 1, ref: 6},
			{at: 400 * ms, cost: 0, want: bktTAllow(0, 2, 1, 100*ms)},
			{at: 2 * sec, op: "undo", cost: 1, ref: 0}, // TAT not below now
			{at: 2 * sec, op: "idle"},
			{at: 2 * sec, cost: 2, want: bktTAllow(0, 2, 0, sec)},
		}},
		{"a billion per 1000s", Config{Tiers: []Tier{{1e9, 1000 * sec}}}, []bktTStep{
			{cost: 1e9, want: bktTAllow(0, 1e9, 0, 1000*sec)},
			{cost: 1, want: bktTDeny(0, 1e9, 0, 1000*sec, us)},
			{at: us, cost: 1, want: bktTAllow(0, 1e9, 0, 1000*sec)},
			{at: 500 * sec, cost: 1, want: bktTAllow(0, 1e9, 500000000-2, 500000002*us)},
		}},
		{"a billion per second: held to one per µs", Config{Tiers: []Tier{{1e9, sec}}}, []bktTStep{
			{cost: 1e9, want: bktTAllow(0, 1e9, 0, 1000*sec)},
			{cost: 1, want: bktTDeny(0, 1e9, 0, 1000*sec, us)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bktTRun(t, bktTNew(t, GCRA, c.cfg), c.steps)
		})
	}
}

func TestBktGCRAParams(t *testing.T) {
	iv, tau, err := GCRAParams(Tier{3, time.Second}, 0)
	if err != nil || iv != 333334 || tau != 1000002 {
		t.Errorf("3/s: %d %d %v", iv, tau, err)
	}
	iv, tau, err = GCRAParams(Tier{100, time.Minute}, 500)
	if err != nil || iv != 600000 || tau != 300000000 {
		t.Errorf("100/min burst 500: %d %d %v", iv, tau, err)
	}
	if _, err := New(GCRA, Config{Tiers: []Tier{{1, 250 * 365 * 24 * time.Hour}}, Burst: 1e9}); err == nil {
		t.Errorf("a tolerance beyond 2^53µs was accepted")
	}
}

func TestBktGCRARetryAfter(t *testing.T) { bktTRetryProperty(t, GCRA, 4) }

func TestBktGCRANoAlloc(t *testing.T) {
	bktTNoAlloc(t, GCRA, Config{Tiers: []Tier{{100, time.Second}, {1000, time.Minute}}})
}

func BenchmarkBktGCRA(b *testing.B) {
	b.Run("1tier", func(b *testing.B) { bktTBench(b, GCRA, Config{Tiers: []Tier{{100, time.Second}}}) })
	b.Run("3tiers", func(b *testing.B) {
		bktTBench(b, GCRA, Config{Tiers: []Tier{{1e9, 1000 * time.Second}, {1e8, time.Hour}, {1e9, 24 * time.Hour}}})
	})
}
