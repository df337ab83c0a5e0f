package algorithms

import (
	"math"
	"testing"
	"time"
)

func TestFixedWindowTimeline(t *testing.T) {
	one := Config{Tiers: []Tier{{3, time.Second}}}
	two := Config{Tiers: []Tier{{3, time.Second}, {5, 10 * time.Second}}}
	ms, us := winTms, time.Microsecond
	cases := []winTCase{
		{"3 per second", one, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, 900*ms)},
			{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, 800*ms)},
			{at: 300 * ms, cost: 1, want: winTNo(0, 3, 0, 700*ms, 700*ms)},
			{at: time.Second - us, cost: 1, want: winTNo(0, 3, 0, us, us)},
			{at: time.Second, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 1500 * ms, cost: 0, want: winTOK(0, 3, 2, 500*ms)},
			{at: 1500 * ms, cost: 2, want: winTOK(0, 3, 0, 500*ms)},
			{at: 1600 * ms, cost: 3, want: winTNo(0, 3, 0, 400*ms, 400*ms)},
			// the 2x burst at a boundary: 3 at 2.999s, 3 more at 3s
			{at: 3*time.Second - us, cost: 3, want: winTOK(0, 3, 0, us)},
			{at: 3 * time.Second, cost: 3, want: winTOK(0, 3, 0, time.Second)},
		}},
		{"3 per second and 5 per 10s", two, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, 900*ms)},
			{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, 800*ms)},
			{at: 300 * ms, cost: 1, want: winTNo(0, 3, 0, 700*ms, 700*ms)},
			{at: 1000 * ms, cost: 1, want: winTOK(1, 5, 1, 9*time.Second)},
			{at: 1100 * ms, cost: 1, want: winTOK(1, 5, 0, 8900*ms)},
			{at: 1200 * ms, cost: 1, want: winTNo(1, 5, 0, 8800*ms, 8800*ms)},
			{at: 10 * time.Second, cost: 1, want: winTOK(0, 3, 2, time.Second)},
		}},
		{"time going backwards", one, []winTStep{
			{at: 900 * ms, cost: 1, want: winTOK(0, 3, 2, 100*ms)},
			{at: 1100 * ms, cost: 1, want: winTOK(0, 3, 2, 900*ms)},
			{at: 950 * ms, cost: 1, want: winTOK(0, 3, 1, 900*ms)}, // counts in 1.1s's window
			{at: -time.Hour, cost: 1, want: winTOK(0, 3, 0, 900*ms)},
			{at: 1200 * ms, cost: 1, want: winTNo(0, 3, 0, 800*ms, 800*ms)},
		}},
		{"undo", one, []winTStep{
			{at: 0, cost: 2, want: winTOK(0, 3, 1, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 0, 900*ms)},
			{at: 110 * ms, cost: 1, undo: true},
			{at: 120 * ms, cost: 1, want: winTOK(0, 3, 0, 880*ms)},
			{at: 130 * ms, cost: 1, want: winTNo(0, 3, 0, 870*ms, 870*ms)},
			{at: 140 * ms, cost: 1, undo: true}, // of a denial: nothing
			{at: 150 * ms, cost: 1, want: winTNo(0, 3, 0, 850*ms, 850*ms)},
		}},
		{"undo in a later window gives nothing", one, []winTStep{
			{at: 900 * ms, cost: 3, want: winTOK(0, 3, 0, 100*ms)},
			{at: 1100 * ms, cost: 3, undo: true},
			{at: 1100 * ms, cost: 3, want: winTOK(0, 3, 0, 900*ms)},
			{at: 1200 * ms, cost: 1, want: winTNo(0, 3, 0, 800*ms, 800*ms)},
		}},
		{"large counts", Config{Tiers: []Tier{{1_000_000_000, 10 * time.Second}}}, []winTStep{
			{at: 0, cost: 999_999_999, want: winTOK(0, 1e9, 1, 10*time.Second)},
			{at: time.Second, cost: 2, want: winTNo(0, 1e9, 1, 9*time.Second, 9*time.Second)},
			{at: 2 * time.Second, cost: 1, want: winTOK(0, 1e9, 0, 8*time.Second)},
			{at: 10 * time.Second, cost: 1e9, want: winTOK(0, 1e9, 0, 10*time.Second)},
		}},
		{"no overflow at the bounds", Config{Tiers: []Tier{{MaxCount, time.Second}}, CountRejected: true}, []winTStep{
			{at: 0, cost: MaxCount, want: winTOK(0, MaxCount, 0, time.Second)},
			{at: 0, cost: 1, want: winTNo(0, MaxCount, 0, time.Second, time.Second)},
			{at: 0, cost: math.MaxInt64, want: winTNo(0, MaxCount, 0, time.Second, time.Second)},
		}},
	}
	winTRunCases(t, FixedWindow, append(cases, winTCostAboveOneOfTwo, winTCostAboveLimit, winTNegativeCost, winTUndoFloor))
}

func TestFixedWindowCountRejected(t *testing.T) {
	ms := winTms
	one := []Tier{{3, time.Second}}
	base := []winTStep{
		{at: 0, cost: 2, want: winTOK(0, 3, 1, time.Second)},
	}
	winTCountRejected(t, FixedWindow, one, base, []winTStep{
		{at: 100 * ms, cost: 2, want: winTNo(0, 3, 1, 900*ms, 900*ms)},
		{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, 800*ms)},
	}, []winTStep{
		{at: 100 * ms, cost: 2, want: winTNo(0, 3, 0, 900*ms, 900*ms)},
		{at: 200 * ms, cost: 1, want: winTNo(0, 3, 0, 800*ms, 800*ms)},
		{at: 1000 * ms, cost: 3, want: winTOK(0, 3, 0, time.Second)},
	})
	two := []Tier{{3, time.Second}, {5, 10 * time.Second}}
	base = []winTStep{
		{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
		{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, 900*ms)},
		{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, 800*ms)},
	}
	winTCountRejected(t, FixedWindow, two, base, []winTStep{
		{at: 500 * ms, cost: 2, want: winTNo(0, 3, 0, 500*ms, 500*ms)},
	}, []winTStep{
		{at: 500 * ms, cost: 2, want: winTNo(1, 5, 0, 9500*ms, 9500*ms)},
	})
}

func TestFixedWindowProperties(t *testing.T) { winTRunProperty(t, FixedWindow, nil) }

func TestFixedWindowNoAlloc(t *testing.T) { winTAllocs(t, FixedWindow) }

func BenchmarkFixedWindow(b *testing.B) { winTBench(b, FixedWindow) }
