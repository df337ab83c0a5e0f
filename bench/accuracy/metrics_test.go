package main

import (
	"testing"
	"time"
)

const bin = 100 * time.Millisecond

// steady is n bins of v requests each.
func steady(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func TestMaxInWindow(t *testing.T) {
	s := steady(30, 10)
	if got := MaxInWindow(s, 10); got != 100 {
		t.Errorf("steady 10 per bin: max in 10 bins = %d, want 100", got)
	}
	s[17] += 5 // one window exceeds the limit
	if got := MaxInWindow(s, 10); got != 105 {
		t.Errorf("with a spike: max in 10 bins = %d, want 105", got)
	}
	if got := MaxInWindow([]int{3, 4}, 10); got != 7 {
		t.Errorf("fewer bins than the window: %d, want 7", got)
	}
}

func TestMeasureExactLimit(t *testing.T) {
	l := Limit{Events: 100, Window: time.Second, Kind: Rolling}
	// Offered 4x the limit, admitted exactly the limit, evenly.
	a := Measure(l, bin, 0, steady(60, 40), steady(60, 10))
	if a.Over != 0 || a.Under != 0 || a.Allowed != 600 || a.MaxWindow != 100 {
		t.Errorf("exact admission: %+v, want over 0, under 0, allowed 600, max 100", a)
	}
}

func TestMeasureOverAdmission(t *testing.T) {
	l := Limit{Events: 100, Window: time.Second, Kind: Rolling}
	admitted := steady(60, 10)
	admitted[25] += 20 // 120 in the windows that hold bin 25
	a := Measure(l, bin, 0, steady(60, 40), admitted)
	if a.MaxWindow != 120 {
		t.Errorf("max in window %d, want 120", a.MaxWindow)
	}
	// The replay refuses the 20 extra and then, as each window slides,
	// keeps refusing as the extra ones hold their place: at least 20.
	if a.Over < 20 {
		t.Errorf("over %d, want at least 20 (%+v)", a.Over, a)
	}
	if a.OverPct() <= 0 {
		t.Errorf("over %% %.2f, want > 0", a.OverPct())
	}
}

func TestMeasureUnderAdmission(t *testing.T) {
	l := Limit{Events: 100, Window: time.Second, Kind: Rolling}
	// Offered half the limit; every fourth bin's requests are refused.
	offered := steady(60, 5)
	admitted := steady(60, 5)
	for i := 0; i < 60; i += 4 {
		admitted[i] = 0
	}
	a := Measure(l, bin, 0, offered, admitted)
	if a.Allowed != 300 || a.Under != 75 || a.Over != 0 {
		t.Errorf("%+v, want allowed 300, under 75, over 0", a)
	}
	if got := a.UnderPct(); got != 25 {
		t.Errorf("under %% %.2f, want 25", got)
	}
}

func TestAdmissibleAligned(t *testing.T) {
	l := Limit{Events: 100, Window: time.Second, Kind: Aligned}
	// 100 at the end of one aligned window and 100 at the start of the
	// next: allowed by fixed_window, 200 in one rolling window.
	admitted := make([]int, 20)
	admitted[7], admitted[8] = 50, 50
	admitted[10], admitted[11] = 50, 50
	a := Measure(l, bin, 30 /* bin 0 starts an aligned window */, admitted, admitted)
	if a.Over != 0 || a.MaxWindow != 200 {
		t.Errorf("boundary burst: %+v, want over 0, max window 200", a)
	}
	// The same burst inside one aligned window is over the limit.
	a = Measure(l, bin, 33, admitted, admitted)
	if a.Over != 100 {
		t.Errorf("burst within one aligned window: over %d, want 100", a.Over)
	}
}

func TestAdmissibleBucket(t *testing.T) {
	l := Limit{Events: 100, Window: time.Second, Kind: Bucket}
	// Offered 4x: the bucket gives its burst plus 10 per bin of refill.
	got := Admissible(l, bin, 0, steady(30, 40))
	if got[0] != 40 || got[1] != 40 || got[2] != 40 || got[3] != 20 || got[4] != 10 || got[29] != 10 {
		t.Errorf("bucket at 4x: %v", got)
	}
	if s := sum(got); s != 100+30*10 {
		t.Errorf("bucket at 4x admits %d over 3 s, want 400", s)
	}
	// A smaller burst caps it.
	l.Burst = 20
	got = Admissible(l, bin, 0, steady(3, 40))
	if got[0] != 30 || got[1] != 10 {
		t.Errorf("burst 20: %v, want 30 then 10", got)
	}
}
