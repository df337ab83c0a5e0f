package algorithms

import (
	"testing"
	"time"
)

func TestBktGCRA(t *testing.T) {
	sec, ms, us := time.Second, bktTms, bktTus
	five := Config{Tiers: []Tier{{5, sec}}}
	cases := []bktTCase{
		{"window not a multiple of events: interval rounded up", Config{Tiers: []Tier{{3, sec}}}, []bktTStep{
			{cost: 3, want: bktTAllow(0, 3, 0, 1000002*us)},
			{cost: 1, want: bktTDeny(0, 3, 0, 1000002*us, 333334*us)},
			{at: 333334 * us, cost: 1, want: bktTAllow(0, 3, 0, 1000002*us)},
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
	bktTRunCases(t, GCRA, append(cases, bktTFivePerSecond, bktTBurstAbove, bktTBurstBelow, bktTCostAboveOne, bktTBackwards, bktTCountRejected, bktTCountRejectedTiers, bktTUndo))
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

func BenchmarkBktGCRA(b *testing.B) {
	bktTBenchTiers(b, GCRA, Tier{1e9, 1000 * time.Second}, Tier{1e8, time.Hour}, Tier{1e9, 24 * time.Hour})
}
