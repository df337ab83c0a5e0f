package algorithms

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSlidingWindowTimeline(t *testing.T) {
	ten := Config{Tiers: []Tier{{10, time.Second}}}
	two := Config{Tiers: []Tier{{3, time.Second}, {5, 10 * time.Second}}}
	ms, us := winTms, time.Microsecond
	cases := []winTCase{
		{"10 per second", ten, []winTStep{
			{at: 0, cost: 5, want: winTOK(0, 10, 5, 2*time.Second)},
			{at: 500 * ms, cost: 5, want: winTOK(0, 10, 0, 1500*ms)},
			// the next window weighs 10 at 90% at 1.1s: 9, room for 1
			{at: 600 * ms, cost: 1, want: winTNo(0, 10, 0, 1400*ms, 500*ms)},
			{at: 1100 * ms, cost: 1, want: winTOK(0, 10, 0, 1900*ms)},
			// now 8.99999 + 1: room for 1 more once the weight is 8 (at 1.2s)
			{at: 1100*ms + us, cost: 1, want: winTNo(0, 10, 0, 1900*ms-us, 100*ms-us)},
			{at: 1500 * ms, cost: 1, want: winTOK(0, 10, 3, 1500*ms)},
			{at: 3500 * ms, cost: 1, want: winTOK(0, 10, 9, 1500*ms)},
			{at: 3500 * ms, cost: 0, want: winTOK(0, 10, 9, 1500*ms)},
		}},
		{"cost above the limit", ten, []winTStep{
			{at: 0, cost: 11, want: winTNo(0, 10, 10, 0, time.Second)},
			{at: 500 * ms, cost: 1, want: winTOK(0, 10, 9, 1500*ms)},
			// cost == limit needs the window of the 1 out of reach: 2s
			{at: 600 * ms, cost: 10, want: winTNo(0, 10, 9, 1400*ms, 1400*ms)},
			{at: 2 * time.Second, cost: 10, want: winTOK(0, 10, 0, 2*time.Second)},
		}},
		{"negative cost is zero", ten, []winTStep{
			{at: 0, cost: -5, want: winTOK(0, 10, 10, 0)},
		}},
		{"3 per second and 5 per 10s", two, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 3, 2, 2*time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, 1900*ms)},
			{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, 1800*ms)},
			// 3 x (1 - 333334/1e6) = 1.999998 <= 2 at 1.333334s
			{at: 300 * ms, cost: 1, want: winTNo(0, 3, 0, 1700*ms, 1033334*us)},
			{at: 1333334 * us, cost: 1, want: winTOK(0, 3, 0, 1666666*us)},
			{at: 2500 * ms, cost: 1, want: winTOK(1, 5, 0, 17500*ms)},
			// the 10s tier: 5 x 80% = 4 at 12s
			{at: 2600 * ms, cost: 1, want: winTNo(1, 5, 0, 17400*ms, 9400*ms)},
		}},
		{"time going backwards", ten, []winTStep{
			{at: 1500 * ms, cost: 1, want: winTOK(0, 10, 9, 1500*ms)},
			{at: 500 * ms, cost: 1, want: winTOK(0, 10, 8, 1500*ms)},
			{at: -time.Hour, cost: 1, want: winTOK(0, 10, 7, 1500*ms)},
		}},
		{"undo", ten, []winTStep{
			{at: 0, cost: 9, want: winTOK(0, 10, 1, 2*time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 10, 0, 1900*ms)},
			{at: 110 * ms, cost: 1, undo: true},
			{at: 120 * ms, cost: 1, want: winTOK(0, 10, 0, 1880*ms)},
			{at: 130 * ms, cost: 1, want: winTNo(0, 10, 0, 1870*ms, 970*ms)},
			{at: 140 * ms, cost: 1, undo: true}, // of a denial: nothing
			{at: 150 * ms, cost: 1, want: winTNo(0, 10, 0, 1850*ms, 950*ms)},
		}},
		{"undo in a later window gives nothing", ten, []winTStep{
			{at: 900 * ms, cost: 10, want: winTOK(0, 10, 0, 1100*ms)},
			{at: 1100 * ms, cost: 10, undo: true},
			{at: 1100 * ms, cost: 2, want: winTNo(0, 10, 1, 900*ms, 100*ms)},
		}},
		{"undo never below zero", ten, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 10, 9, 2*time.Second)},
			{at: 0, cost: 9, undo: true},
			{at: 0, cost: 10, want: winTOK(0, 10, 0, 2*time.Second)},
		}},
		{"no overflow at the bounds", Config{Tiers: []Tier{{MaxCount, time.Second}}, CountRejected: true}, []winTStep{
			{at: 0, cost: MaxCount, want: winTOK(0, MaxCount, 0, 2*time.Second)},
			// 1 unit fits once the full window weighs MaxCount-1: after 1µs.
			{at: 0, cost: 1, want: winTNo(0, MaxCount, 0, 2*time.Second, time.Second+time.Microsecond)},
			{at: 0, cost: math.MaxInt64, want: winTNo(0, MaxCount, 0, 2*time.Second, time.Second)},
		}},
	}
	winTRunCases(t, SlidingWindow, append(cases, winTCostAboveOneOfTwo))
}

// TestSlidingWindowLarge: a billion per hour, where the weighted previous
// window needs float64 care: 1e9 x (1 - 3/3.6e9) = 999999999.17 > 999999999,
// 1e9 x (1 - 4/3.6e9) = 999999998.89 fits.
func TestSlidingWindowLarge(t *testing.T) {
	tH := time.Unix(1_699_999_200, 0) // on an hour
	h, us := time.Hour, time.Microsecond
	l := winTNew(t, SlidingWindow, Config{Tiers: []Tier{{1_000_000_000, h}}})
	st := l.NewState()
	for i, s := range []winTStep{
		{at: 0, cost: 1e9, want: winTOK(0, 1e9, 0, 2*h)},
		{at: h / 2, cost: 1, want: winTNo(0, 1e9, 0, 3*h/2, h/2+4*us)},
		{at: h + 3*us, cost: 1, want: winTNo(0, 1e9, 0, h-3*us, us)},
		{at: h + 4*us, cost: 1, want: winTOK(0, 1e9, 0, 2*h-4*us)},
		{at: 3 * h / 2, cost: 1, want: winTOK(0, 1e9, 499_999_998, 3*h/2)},
	} {
		if got := winTNoMore(st.Take(tH.Add(s.at), s.cost)); got != s.want {
			t.Errorf("step %d:\n got  %+v\n want %+v", i, got, s.want)
		}
	}
}

func TestSlidingWindowCountRejected(t *testing.T) {
	ms := winTms
	ten := []Tier{{10, time.Second}}
	base := []winTStep{{at: 0, cost: 8, want: winTOK(0, 10, 2, 2*time.Second)}}
	winTCountRejected(t, SlidingWindow, ten, base, []winTStep{
		{at: 100 * ms, cost: 3, want: winTNo(0, 10, 2, 1900*ms, 1025*ms)},
		{at: 200 * ms, cost: 2, want: winTOK(0, 10, 0, 1800*ms)},
	}, []winTStep{
		{at: 100 * ms, cost: 3, want: winTNo(0, 10, 0, 1900*ms, 1200*ms)},
		{at: 200 * ms, cost: 2, want: winTNo(0, 10, 0, 1800*ms, 1000*ms)},
	})
}

func TestSlidingWindowProperties(t *testing.T) { winTRunProperty(t, SlidingWindow, nil) }

// TestSlidingWindowPropertiesLarge: the same properties with counts in the
// millions to billions, where the float64 weighting is least exact.
func TestSlidingWindowPropertiesLarge(t *testing.T) {
	l := winTNew(t, SlidingWindow, Config{Tiers: []Tier{{1_000_000_000, time.Hour}}})
	st := l.NewState()
	now := time.Unix(1_699_999_200, 0)
	for i := range 2000 {
		now = now.Add(time.Duration(i%17) * 997 * time.Millisecond)
		cost := int64(1 + (i*7919)%5_000_000)
		d := st.Take(now, cost)
		if d.Allowed {
			continue
		}
		if !winTClone(st).Take(now.Add(d.RetryAfter), cost).Allowed {
			t.Fatalf("step %d: %+v: refused after RetryAfter", i, d)
		}
		if winTClone(st).Take(now.Add(d.RetryAfter-time.Microsecond), cost).Allowed {
			t.Fatalf("step %d: %+v: admitted before RetryAfter", i, d)
		}
		if winTClone(st).Take(now, d.Remaining+1).Allowed {
			t.Fatalf("step %d: %+v: admits Remaining+1", i, d)
		}
	}
}

func TestSlidingWindowNoAlloc(t *testing.T) { winTAllocs(t, SlidingWindow) }

func BenchmarkSlidingWindow(b *testing.B) { winTBench(b, SlidingWindow) }

// first is the smallest offset at which a request fits, as a scan of every
// offset finds it, for random counts and costs (the closed form and the
// bisection are shortcuts to the same answer).
func TestSlidingCountsFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		c := SlidingCounts{Events: 1 + rng.Int64N(50), Window: 1 + rng.Int64N(300)}
		P, C := rng.Int64N(2*c.Events+1), rng.Int64N(c.Events+1)
		lo, cost := rng.Int64N(c.Window), 1+rng.Int64N(c.Events)
		want := int64(-1)
		for x := lo; x < c.Window; x++ {
			if c.fits(P, C, x, cost) {
				want = x
				break
			}
		}
		if got := c.first(P, C, lo, cost); got != want {
			t.Fatalf("%+v: first(P %d, C %d, lo %d, cost %d) = %d, want %d", c, P, C, lo, cost, got, want)
		}
	}
}

// TestSlidingCountsWeighted: weighted is the model's p(P, e), rounded as
// the Lua twin rounds it, up to the bounds (P*W/W is not always P once
// P*W reaches 2^53).
func TestSlidingCountsWeighted(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		c := SlidingCounts{Window: MinWindow.Microseconds() + rng.Int64N(MaxWindow.Microseconds())}
		P := 1 + rng.Int64N(2*MaxCount)
		for _, e := range []int64{0, 1, rng.Int64N(c.Window)} {
			want := float64(float64(P)*float64(c.Window-e)) / float64(c.Window)
			if got := c.weighted(P, e); got != want {
				t.Fatalf("W %d: weighted(P %d, e %d) = %v, want %v", c.Window, P, e, got, want)
			}
		}
	}
}

// randomLimit returns counts with no units and a random limit: up to the
// bounds, or, when small, up to 2^20 per hour (exact integers).
func randomLimit(rng *rand.Rand, small bool) SlidingCounts {
	if small {
		return SlidingCounts{
			Events: 1 + rng.Int64N(1+rng.Int64N(1<<20)),
			Window: MinWindow.Microseconds() + rng.Int64N(1+rng.Int64N(time.Hour.Microseconds())),
		}
	}
	return SlidingCounts{
		Events: 1 + rng.Int64N(MaxCount),
		Window: MinWindow.Microseconds() + rng.Int64N(MaxWindow.Microseconds()),
	}
}

// TestSlidingCountsFirstLarge: up to the bounds, where no scan can check
// it, firstAfter's answer is the first offset that fits (the one before
// does not), exact integers and rounded doubles agree, and both ways of
// computing it (integers while P*W < 2^53, the bisection of doubles)
// give the same offset.
func TestSlidingCountsFirstLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	exact := 0
	for i := range 200000 {
		c := randomLimit(rng, i%2 == 0)
		P := 1 + rng.Int64N(2*c.Events)
		a := rng.Int64N(P) // below P, as firstAfter is called
		bad := rng.Int64N(c.Window)
		if c.weighted(P, bad) <= float64(a) {
			continue // fits at bad: not a call firstAfter gets
		}
		if float64(P)*float64(c.Window) < 1<<53 {
			exact++
			if got, want := c.firstAfter(P, a, bad), c.firstAfterRounded(P, a, bad); got != want {
				t.Fatalf("%+v: firstAfter(P %d, a %d, bad %d) = %d, the doubles' bisection %d", c, P, a, bad, got, want)
			}
		}
		x := c.firstAfter(P, a, bad)
		switch {
		case x == -1:
			if c.weighted(P, c.Window-1) <= float64(a) {
				t.Fatalf("%+v: firstAfter(P %d, a %d, bad %d) = -1, but W-1 fits", c, P, a, bad)
			}
		case x <= bad || x >= c.Window || c.weighted(P, x) > float64(a) || (x-1 > bad && c.weighted(P, x-1) <= float64(a)):
			t.Fatalf("%+v: firstAfter(P %d, a %d, bad %d) = %d: not the first offset that fits", c, P, a, bad, x)
		}
	}
	if exact < 10000 {
		t.Fatalf("only %d calls in exact integers", exact)
	}
}

// TestSlidingCountsMoreAfterQuiet: after a quiet window, moreAfter's
// closed form gives what the general path (moreAfterAny) gives, small
// counts and up to the bounds.
func TestSlidingCountsMoreAfterQuiet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	quiet := 0
	for i := range 200000 {
		c := randomLimit(rng, i%2 == 0)
		c.Cur = 1 + rng.Int64N(c.Events)
		if i%7 == 0 {
			c.Cur = c.Events
		}
		c.Start = winStart(rng.Int64N(1<<52), c.Window)
		at := c.Start + rng.Int64N(c.Window)
		r := c.Remaining(at)
		got, want := c.moreAfter(at, r), c.moreAfterAny(at, r)
		if got != want {
			t.Fatalf("%+v at %d (Remaining %d): moreAfter %d, moreAfterAny %d", c, at, r, got, want)
		}
		if float64(c.Cur)*float64(c.Window) < 1<<53 {
			quiet++
		}
	}
	if quiet < 50000 {
		t.Fatalf("only %d states on the closed form", quiet)
	}
}
