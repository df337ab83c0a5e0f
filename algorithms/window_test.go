package algorithms

import (
	"math"
	"testing"
)

// TestWindowIndex checks WindowIndex against a floor division written the
// other way (quotient, then one less for a negative remainder) and against
// winStart, before the epoch too, and at the ends of int64 where winStart
// cannot be compared.
func TestWindowIndex(t *testing.T) {
	floorDiv := func(a, b int64) int64 {
		q := a / b
		if a%b != 0 && a < 0 {
			q--
		}
		return q
	}
	cases := []struct{ t, w, want int64 }{
		{0, 1_000_000, 0},
		{1, 1_000_000, 0},
		{999_999, 1_000_000, 0},
		{1_000_000, 1_000_000, 1},
		{-1, 1_000_000, -1},
		{-999_999, 1_000_000, -1},
		{-1_000_000, 1_000_000, -1},
		{-1_000_001, 1_000_000, -2},
		{-7, 3, -3},
		{-6, 3, -2},
		{7, 3, 2},
		{5, 1, 5},
		{-5, 1, -5},
		{math.MaxInt64, 1_000_000, math.MaxInt64 / 1_000_000},
		{math.MinInt64, 1_000_000, math.MinInt64/1_000_000 - 1},
		{math.MinInt64, 1, math.MinInt64},
		{math.MinInt64 + 1, math.MaxInt64, -1},
		{math.MinInt64, math.MaxInt64, -2},
	}
	for _, c := range cases {
		got := WindowIndex(c.t, c.w)
		if got != c.want || got != floorDiv(c.t, c.w) {
			t.Errorf("WindowIndex(%d, %d) = %d, want %d (floorDiv %d)", c.t, c.w, got, c.want, floorDiv(c.t, c.w))
		}
	}
	for w := int64(1); w <= 7; w++ {
		for ti := int64(-50); ti <= 50; ti++ {
			if got, f := WindowIndex(ti, w), floorDiv(ti, w); got != f {
				t.Errorf("WindowIndex(%d, %d) = %d, floorDiv %d", ti, w, got, f)
			}
			if got, s := WindowIndex(ti, w)*w, winStart(ti, w); got != s {
				t.Errorf("WindowIndex(%d, %d)*w = %d, winStart %d", ti, w, got, s)
			}
		}
	}
}
