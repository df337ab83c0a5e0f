package algorithms

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	want := []string{SlidingLog, SlidingWindow, FixedWindow, TokenBucket, LeakyBucket, GCRA, Concurrency}
	if strings.Join(Names, " ") != strings.Join(want, " ") {
		t.Fatalf("Names = %v, want %v (the default first)", Names, want)
	}
	if a, err := Lookup(""); err != nil || a.Name != Default || Default != SlidingLog {
		t.Errorf(`Lookup("") = %q, %v; want the default, sliding_log`, a.Name, err)
	}
	_, err := Lookup("leaky")
	if err == nil || !strings.Contains(err.Error(), strings.Join(want, ", ")) {
		t.Errorf("unknown algorithm: %v", err)
	}
	if got := NamesWhere(func(a Algorithm) bool { return a.Name != SlidingLog && a.Name != Concurrency }, " or "); got != "sliding_window, fixed_window, token_bucket, leaky_bucket or gcra" {
		t.Errorf("NamesWhere in the order of Names: %q", got)
	}
	if got := NamesWhere(func(a Algorithm) bool { return a.Lease }, " or "); got != Concurrency {
		t.Errorf("NamesWhere of one: %q", got)
	}
	one := []Tier{{5, time.Second}}
	for _, name := range Names {
		a, _ := Lookup(name)
		l, err := New(name, Config{Tiers: one})
		if err != nil || l.Name() != name {
			t.Fatalf("New(%s): %v", name, err)
		}
		if UsesBurst(name) != (name == TokenBucket || name == LeakyBucket || name == GCRA) {
			t.Errorf("%s: UsesBurst %v", name, UsesBurst(name))
		}
		if ok, all := Summable(name); ok != (name == FixedWindow || name == SlidingWindow) || all != "sliding_window or fixed_window" {
			t.Errorf("%s: Summable %v %q", name, ok, all)
		}
		if a.Lease != (name == Concurrency) || a.Delay != (name == LeakyBucket) {
			t.Errorf("%s: Lease %v, Delay %v", name, a.Lease, a.Delay)
		}
	}
}

// TestRegistryRefuses: what an algorithm does not take is refused by New,
// with the part of the Config at fault.
func TestRegistryRefuses(t *testing.T) {
	two := []Tier{{5, time.Second}, {50, time.Minute}}
	for _, c := range []struct {
		name  string
		cfg   Config
		field string
		tier  int
		msg   string
	}{
		{SlidingLog, Config{Tiers: two, Burst: 3}, "burst", -1, "burst applies only to algorithms token_bucket, leaky_bucket and gcra, not sliding_log"},
		{Concurrency, Config{Tiers: two}, "tiers", 1, "algorithm concurrency takes exactly one limit (requests in flight, lease lifetime), got 2"},
		{Concurrency, Config{Tiers: two[:1], CountRejected: true}, "count_rejected", -1, "count_rejected does not apply to algorithm concurrency"},
		{GCRA, Config{Tiers: []Tier{{5, time.Second}, {0, time.Second}}}, "events", 1, "limit 2: events must be positive, got 0"},
		{FixedWindow, Config{Tiers: []Tier{{5, time.Microsecond}}}, "window", 0, "limit 1: window must be at least 1ms, got 1µs"},
		{TokenBucket, Config{Tiers: two, Burst: -1}, "burst", -1, "burst must be positive, got -1"},
		{TokenBucket, Config{Tiers: []Tier{{1 << 60, time.Second}}}, "events", 0, "limit 1: events must be at most 1125899906842624, got 1152921504606846976"},
		{SlidingLog, Config{Tiers: []Tier{{5, time.Second}, {MaxCount + 1, time.Hour}}}, "events", 1, "limit 2: events must be at most 1125899906842624, got 1125899906842625"},
		{FixedWindow, Config{Tiers: []Tier{{5, MaxWindow + time.Microsecond}}}, "window", 0, "limit 1: window must be at most 3650d (about 10 years), got 87600h0m0.000001s"},
		{GCRA, Config{Tiers: two, Burst: MaxCount + 1}, "burst", -1, "burst must be at most 1125899906842624, got 1125899906842625"},
	} {
		_, err := New(c.name, c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || ce.Tier != c.tier || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("New(%s, %+v) = %v (%+v), want field %s tier %d: %q", c.name, c.cfg, err, ce, c.field, c.tier, c.msg)
		}
	}
}

// TestSlidingCounts: the exported arithmetic decides as a sliding_window
// state does.
func TestSlidingCounts(t *testing.T) {
	st := winTNew(t, SlidingWindow, Config{Tiers: []Tier{{10, time.Second}}}).NewState().(*slidingWindowState)
	now := winT0
	for i := range 300 {
		now = now.Add(time.Duration(i%13) * 37 * time.Millisecond)
		cost := int64(1 + i%4)
		d := st.Take(now, cost)
		c := st.tiers[0] // rolled to now by the Take
		t0 := now.UnixMicro()
		if d.Allowed {
			if d.Remaining != c.Remaining(t0) {
				t.Fatalf("step %d: %+v, Remaining %d", i, d, c.Remaining(t0))
			}
			continue
		}
		if c.Fits(t0, cost) || d.RetryAfter != Micros(c.RetryAfter(t0, cost)) || d.ResetAfter != Micros(c.ResetAfter(t0)) {
			t.Fatalf("step %d: %+v, counts %+v: Fits %v RetryAfter %d ResetAfter %d", i, d, c, c.Fits(t0, cost), c.RetryAfter(t0, cost), c.ResetAfter(t0))
		}
	}
}
