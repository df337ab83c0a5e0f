package algorithms

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Helpers shared by the sliding_log, sliding_window and fixed_window tests
// (prefix winT).

// winT0 is aligned to windows of 1s and 10s.
var winT0 = time.Unix(1_700_000_000, 0)

const winTms = time.Millisecond

// winTStep is one Take (or Undo, with undo set) at winT0+at.
type winTStep struct {
	at   time.Duration
	cost int64
	want Decision // every field but MoreAfter (see TestMoreAfter) is compared
	undo bool     // Undo(at, cost, last decision) instead of Take
}

// winTNoMore is d without its MoreAfter, for the tables that predate it.
func winTNoMore(d Decision) Decision {
	d.MoreAfter = 0
	return d
}

func winTOK(tier int, limit, rem int64, reset time.Duration) Decision {
	return Decision{Allowed: true, Tier: tier, Limit: limit, Remaining: rem, ResetAfter: reset}
}

func winTNo(tier int, limit, rem int64, reset, retry time.Duration) Decision {
	return Decision{Tier: tier, Limit: limit, Remaining: rem, ResetAfter: reset, RetryAfter: retry}
}

func winTNew(t testing.TB, name string, cfg Config) Limiter {
	t.Helper()
	l, err := New(name, cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	if l.Name() != name {
		t.Fatalf("Name() = %q, want %q", l.Name(), name)
	}
	return l
}

// winTRun plays steps against a new state and checks every decision.
func winTRun(t *testing.T, name string, cfg Config, steps []winTStep) State {
	t.Helper()
	st := winTNew(t, name, cfg).NewState()
	var last Decision
	for i, s := range steps {
		if s.undo {
			st.Undo(winT0.Add(s.at), s.cost, last)
			continue
		}
		got := st.Take(winT0.Add(s.at), s.cost)
		last = got
		if got := winTNoMore(got); got != s.want {
			t.Errorf("step %d (at %v cost %d):\n got  %+v\n want %+v", i, s.at, s.cost, got, s.want)
		}
	}
	return st
}

// winTCountRejected plays base then without against a new state of tiers,
// and base then with against one of tiers that counts rejected requests.
func winTCountRejected(t *testing.T, name string, tiers []Tier, base, without, with []winTStep) {
	t.Helper()
	winTRun(t, name, Config{Tiers: tiers}, slices.Concat(base, without))
	winTRun(t, name, Config{Tiers: tiers, CountRejected: true}, slices.Concat(base, with))
}

// winTCase is a timeline of a window algorithm.
type winTCase = timeline[winTStep]

func winTRunCases(t *testing.T, name string, cases []winTCase) {
	runTimelines(t, cases, func(t *testing.T, cfg Config, steps []winTStep) { winTRun(t, name, cfg, steps) })
}

// Timelines that the window algorithms (fixed_window and sliding_log; the
// first all three) decide alike.
var (
	winTCostAboveOneOfTwo = winTCase{"cost above one tier of two", Config{Tiers: []Tier{{3, time.Second}, {5, 10 * time.Second}}}, []winTStep{
		{at: 0, cost: 4, want: winTNo(0, 3, 3, 0, time.Second)},
		{at: 0, cost: 6, want: winTNo(1, 5, 5, 0, 10*time.Second)},
	}}
	winTCostAboveLimit = winTCase{"cost above the limit", Config{Tiers: []Tier{{3, time.Second}}}, []winTStep{
		{at: 0, cost: 4, want: winTNo(0, 3, 3, 0, time.Second)},
		{at: 0, cost: 3, want: winTOK(0, 3, 0, time.Second)},
		{at: 10 * winTms, cost: 100, want: winTNo(0, 3, 0, 990*winTms, time.Second)},
	}}
	winTNegativeCost = winTCase{"negative cost is zero", Config{Tiers: []Tier{{3, time.Second}}}, []winTStep{
		{at: 0, cost: -5, want: winTOK(0, 3, 3, 0)},
	}}
	winTUndoFloor = winTCase{"undo never below zero", Config{Tiers: []Tier{{3, time.Second}}}, []winTStep{
		{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
		{at: 0, cost: 9, undo: true},
		{at: 0, cost: 3, want: winTOK(0, 3, 0, time.Second)},
	}}
)

// winTClone deep-copies one of the three window states.
func winTClone(st State) State {
	switch s := st.(type) {
	case *slidingLogState:
		c := *s
		c.tiers = slices.Clone(s.tiers)
		for i := range c.tiers {
			c.tiers[i].buf = slices.Clone(c.tiers[i].buf)
		}
		return &c
	case *slidingWindowState:
		c := *s
		c.tiers = slices.Clone(s.tiers)
		return &c
	case *fixedWindowState:
		c := *s
		c.tiers = slices.Clone(s.tiers)
		return &c
	}
	panic("winTClone: unknown state")
}

// winTRandConfig returns 1 to 3 tiers of small limits and odd windows.
func winTRandConfig(r *rand.Rand, countRejected bool) Config {
	cfg := Config{CountRejected: countRejected}
	n := 1 + r.IntN(3)
	for range n {
		cfg.Tiers = append(cfg.Tiers, Tier{
			Events: 1 + r.Int64N(12),
			Window: time.Duration(1000+r.IntN(60_000)) * time.Microsecond,
		})
	}
	return cfg
}

// winTIdleAt is whether a state is idle at winT0+at.
type winTIdleAt struct {
	at   time.Duration
	idle bool
}

// TestWindowIdle: when a state of each window algorithm becomes idle (see
// winTIdle).
func TestWindowIdle(t *testing.T) {
	ms := winTms
	for name, want := range map[string][]winTIdleAt{
		FixedWindow: {
			{-time.Hour, false},
			{0, false},
			{1500 * ms, false},
			{10*time.Second - time.Microsecond, false},
			{10 * time.Second, true},
		},
		SlidingWindow: {
			{-time.Hour, false},
			{0, false},
			{1500 * ms, false},
			{10 * time.Second, false}, // the 10s tier still weighs the previous window
			{20*time.Second - time.Microsecond, false},
			{20 * time.Second, true},
		},
		SlidingLog: {
			{-time.Hour, false}, // clamped to the latest instant seen
			{0, false},
			{1500 * ms, false}, // the 10s tier still holds both
			{10*time.Second + 500*ms - time.Microsecond, false},
			{10*time.Second + 500*ms, true},
		},
	} {
		t.Run(name, func(t *testing.T) { winTIdle(t, name, want) })
	}
}

// winTIdle checks Idle of a state of name with tiers 3/s and 5/10s that
// took 1 unit at winT0 and 1 at 500ms: at the instants of want, and once
// the only take is undone.
func winTIdle(t *testing.T, name string, want []winTIdleAt) {
	l := winTNew(t, name, Config{Tiers: []Tier{{3, time.Second}, {5, 10 * time.Second}}})
	st := l.NewState()
	if !st.Idle(winT0) {
		t.Fatal("new state not idle")
	}
	st.Take(winT0, 1)
	st.Take(winT0.Add(500*winTms), 1)
	for _, c := range want {
		if got := st.Idle(winT0.Add(c.at)); got != c.idle {
			t.Errorf("Idle(t0+%v) = %v, want %v", c.at, got, c.idle)
		}
	}
	// An Undo of everything makes it idle at once.
	st = l.NewState()
	d := st.Take(winT0, 2)
	st.Undo(winT0, 2, d)
	if !st.Idle(winT0) {
		t.Error("not idle after undoing the only take")
	}
}

// winTRef is a reference model to compare a State against, step by step.
type winTRef interface {
	Take(now int64, cost int64) Decision
	Undo(now int64, cost int64, d Decision)
}

// winTProperty plays a random timeline against a state of name and checks
// the properties every Decision must have; ref, when not nil, must agree on
// every decision.
func winTProperty(t *testing.T, name string, cfg Config, r *rand.Rand, steps int, ref winTRef) {
	t.Helper()
	l := winTNew(t, name, cfg)
	st := l.NewState()
	minE, maxE, maxW := cfg.Tiers[0].Events, int64(0), time.Duration(0)
	for _, tr := range cfg.Tiers {
		minE, maxE, maxW = min(minE, tr.Events), max(maxE, tr.Events), max(maxW, tr.Window)
	}
	step0 := cfg.Tiers[0].Window / time.Duration(cfg.Tiers[0].Events) * 3 / 2
	now := winT0.Add(time.Duration(r.Int64N(int64(time.Hour))))
	var seen time.Time // the latest instant the state has seen
	for i := range steps {
		switch x := r.IntN(20); {
		case x < 2: // same instant
		case x < 4: // backwards
			now = now.Add(-time.Duration(r.Int64N(int64(maxW))))
		case x < 5: // long pause
			now = now.Add(time.Duration(r.Int64N(3 * int64(maxW))))
		default:
			now = now.Add(time.Duration(r.Int64N(int64(step0) + 1)))
		}
		cost := int64(1)
		if r.IntN(5) == 0 {
			cost = r.Int64N(maxE + 2)
		}
		eff := seen
		if now.After(seen) {
			eff = now
		}
		// Idle means indistinguishable from a new state.
		if st.Idle(now) {
			a, b := winTClone(st).Take(now, cost), l.NewState().Take(eff, cost)
			if a != b {
				t.Fatalf("step %d: Idle state decides %+v, a new one %+v", i, a, b)
			}
		}
		d := st.Take(now, cost)
		seen = eff
		if ref != nil {
			// The reference has no MoreAfter: the checks below test it.
			if want, got := ref.Take(now.UnixMicro(), cost), winTNoMore(d); got != want {
				t.Fatalf("step %d (now %v, cost %d): got %+v, reference %+v", i, now.Sub(winT0), cost, d, want)
			}
		}
		tier := cfg.Tiers[d.Tier]
		if d.Limit != tier.Events || d.Remaining < 0 || d.Remaining > d.Limit || d.Delay != 0 || d.Token != 0 || d.ResetAfter < 0 {
			t.Fatalf("step %d: bad decision %+v for %+v", i, d, cfg)
		}
		if d.Allowed != (d.RetryAfter == 0) {
			t.Fatalf("step %d: Allowed %v with RetryAfter %v", i, d.Allowed, d.RetryAfter)
		}
		// Remaining: r+1 more units are refused now, r are admitted (when
		// allowed: the tier with the fewest remaining).
		if winTClone(st).Take(eff, d.Remaining+1).Allowed {
			t.Fatalf("step %d: %+v, yet %d more units are admitted", i, d, d.Remaining+1)
		}
		if d.Allowed && !winTClone(st).Take(eff, d.Remaining).Allowed {
			t.Fatalf("step %d: %+v, yet %d more units are refused", i, d, d.Remaining)
		}
		// RetryAfter: exact to the microsecond, never early.
		if !d.Allowed {
			if cost > minE {
				for _, tr := range cfg.Tiers {
					if cost > tr.Events && d.RetryAfter < tr.Window {
						t.Fatalf("step %d: cost %d > %d: RetryAfter %v < window %v", i, cost, tr.Events, d.RetryAfter, tr.Window)
					}
				}
			} else {
				if !winTClone(st).Take(eff.Add(d.RetryAfter), cost).Allowed {
					t.Fatalf("step %d: %+v: refused again after RetryAfter", i, d)
				}
				if winTClone(st).Take(eff.Add(d.RetryAfter-time.Microsecond), cost).Allowed {
					t.Fatalf("step %d: %+v: admitted 1µs before RetryAfter", i, d)
				}
			}
		}
		// MoreAfter: zero exactly when the tier is whole, never after it is;
		// for a single tier, exact to the microsecond: Remaining+1 units
		// are admitted then, not 1µs earlier.
		if (d.MoreAfter == 0) != (d.Remaining == d.Limit) || d.MoreAfter > d.ResetAfter {
			t.Fatalf("step %d: %+v: MoreAfter inconsistent with Remaining or ResetAfter", i, d)
		}
		if len(cfg.Tiers) == 1 && d.MoreAfter > 0 {
			if !winTClone(st).Take(eff.Add(d.MoreAfter), d.Remaining+1).Allowed {
				t.Fatalf("step %d: %+v: %d units refused at MoreAfter", i, d, d.Remaining+1)
			}
			if winTClone(st).Take(eff.Add(d.MoreAfter-time.Microsecond), d.Remaining+1).Allowed {
				t.Fatalf("step %d: %+v: %d units admitted 1µs before MoreAfter", i, d, d.Remaining+1)
			}
		}
		// ResetAfter: whole (idle) exactly then, for a single tier.
		if len(cfg.Tiers) == 1 {
			if !st.Idle(eff.Add(d.ResetAfter)) {
				t.Fatalf("step %d: %+v: not idle after ResetAfter", i, d)
			}
			if d.ResetAfter > 0 && st.Idle(eff.Add(d.ResetAfter-time.Microsecond)) {
				t.Fatalf("step %d: %+v: idle before ResetAfter", i, d)
			}
		}
		if d.Allowed && r.IntN(8) == 0 {
			at := now.Add(time.Duration(r.Int64N(int64(50 * time.Microsecond))))
			st.Undo(at, cost, d)
			if ref != nil {
				ref.Undo(at.UnixMicro(), cost, d)
			}
			if cost > 0 && at.After(seen) {
				seen = at
			}
		}
	}
}

// winTRunProperty runs winTProperty over random configurations.
func winTRunProperty(t *testing.T, name string, newRef func(Config) winTRef) {
	for _, cr := range []bool{false, true} {
		r := rand.New(rand.NewPCG(7, map[bool]uint64{false: 1, true: 2}[cr]))
		for range 60 {
			cfg := winTRandConfig(r, cr)
			var ref winTRef
			if newRef != nil {
				ref = newRef(cfg)
			}
			winTProperty(t, name, cfg, r, 400, ref)
			if t.Failed() {
				t.Fatalf("config %+v", cfg)
			}
		}
	}
}

// winTBench measures Take at 1ms intervals (about 1 request in 10 admitted),
// serial and with one state per goroutine in parallel.
func winTBench(b *testing.B, name string) {
	cfgs := []struct {
		name string
		cfg  Config
	}{
		{"1tier", Config{Tiers: []Tier{{100, time.Second}}}},
		{"2tiers", Config{Tiers: []Tier{{100, time.Second}, {1000, time.Minute}}}},
	}
	for _, c := range cfgs {
		l := winTNew(b, name, c.cfg)
		b.Run(c.name+"/serial", func(b *testing.B) {
			st := l.NewState()
			now := winT0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now = now.Add(time.Millisecond)
				st.Take(now, 1)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				st := l.NewState()
				now := winT0
				for pb.Next() {
					now = now.Add(time.Millisecond)
					st.Take(now, 1)
				}
			})
		})
	}
}

// winTAllocs checks that Take and Undo do not allocate once a state is warm.
func winTAllocs(t *testing.T, name string) {
	l := winTNew(t, name, Config{Tiers: []Tier{{100, time.Second}, {1000, time.Minute}}})
	st := l.NewState()
	now := winT0
	for range 5000 { // warm: the log reaches its peak size
		now = now.Add(time.Millisecond)
		st.Take(now, 1)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		if d := st.Take(now, 1); d.Allowed {
			st.Undo(now, 1, d)
		}
		st.Idle(now)
	})
	if allocs != 0 {
		t.Errorf("%s: %v allocations per Take", name, allocs)
	}
}

// winTRefLog is a naive sliding log: one slice of unit timestamps per tier.
type winTRefLog struct {
	cfg   Config
	last  int64
	units [][]int64
}

func newWinTRefLog(cfg Config) winTRef {
	return &winTRefLog{cfg: cfg, last: -1 << 62, units: make([][]int64, len(cfg.Tiers))}
}

func (m *winTRefLog) Take(now, cost int64) Decision {
	now = max(now, m.last)
	m.last = now
	cost = max(cost, 0)
	ok := true
	for i, tr := range m.cfg.Tiers {
		w := tr.Window.Microseconds()
		m.units[i] = slices.DeleteFunc(m.units[i], func(ts int64) bool { return ts <= now-w })
		if int64(len(m.units[i]))+cost > tr.Events {
			ok = false
		}
	}
	if ok || m.cfg.CountRejected {
		for i, tr := range m.cfg.Tiers {
			for range min(cost, tr.Events) {
				m.units[i] = append(m.units[i], now)
			}
			if n := int64(len(m.units[i])); n > tr.Events {
				m.units[i] = m.units[i][n-tr.Events:]
			}
		}
	}
	d := Decision{Allowed: ok, Tier: -1}
	var pickedMore time.Duration
	for i, tr := range m.cfg.Tiers {
		w := tr.Window.Microseconds()
		u := m.units[i]
		rem := max(0, tr.Events-int64(len(u)))
		var reset, wait, more time.Duration
		if len(u) > 0 {
			reset = time.Duration(u[len(u)-1]+w-now) * time.Microsecond
			more = time.Duration(u[0]+w-now) * time.Microsecond
		}
		if cost > tr.Events {
			wait = tr.Window
		} else if k := int64(len(u)) + cost - tr.Events; k > 0 {
			wait = time.Duration(u[k-1]+w-now) * time.Microsecond
		}
		// Allowed: a tie in remaining goes to the tier that admits one
		// more unit last.
		better := d.Tier < 0 || ok && (rem < d.Remaining || rem == d.Remaining && more > pickedMore) || !ok && wait > d.RetryAfter
		if better {
			d.Tier, d.Limit, d.Remaining, d.ResetAfter, pickedMore = i, tr.Events, rem, reset, more
			if !ok {
				d.RetryAfter = wait
			}
		}
	}
	return d
}

func (m *winTRefLog) Undo(now, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	m.last = max(now, m.last)
	for i := range m.units {
		m.units[i] = m.units[i][:max(0, int64(len(m.units[i]))-cost)]
	}
}

func TestSlidingLogTimeline(t *testing.T) {
	one := Config{Tiers: []Tier{{3, time.Second}}}
	two := Config{Tiers: []Tier{{3, time.Second}, {5, 10 * time.Second}}}
	ms := winTms
	cases := []winTCase{
		{"3 per second", one, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, time.Second)},
			{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 300 * ms, cost: 1, want: winTNo(0, 3, 0, 900*ms, 700*ms)},
			{at: time.Second - time.Microsecond, cost: 1, want: winTNo(0, 3, 0, 200*ms+time.Microsecond, time.Microsecond)},
			{at: time.Second, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 1050 * ms, cost: 1, want: winTNo(0, 3, 0, 950*ms, 50*ms)},
			{at: 1300 * ms, cost: 2, want: winTOK(0, 3, 0, time.Second)},
			{at: 1400 * ms, cost: 0, want: winTOK(0, 3, 0, 900*ms)},
			// cost 3 needs the two entries of 1.3s gone too.
			{at: 2100 * ms, cost: 3, want: winTNo(0, 3, 1, 200*ms, 200*ms)},
			{at: 2300 * ms, cost: 3, want: winTOK(0, 3, 0, time.Second)},
		}},
		{"3 per second and 5 per 10s", two, []winTStep{
			{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, time.Second)},
			{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 300 * ms, cost: 1, want: winTNo(0, 3, 0, 900*ms, 700*ms)},
			{at: 1000 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 1250 * ms, cost: 1, want: winTOK(1, 5, 0, 10*time.Second)},
			{at: 1500 * ms, cost: 1, want: winTNo(1, 5, 0, 9750*ms, 8500*ms)},
			{at: 10 * time.Second, cost: 1, want: winTOK(1, 5, 0, 10*time.Second)},
		}},
		{"time going backwards", one, []winTStep{
			{at: time.Second, cost: 1, want: winTOK(0, 3, 2, time.Second)},
			{at: 0, cost: 1, want: winTOK(0, 3, 1, time.Second)},
			{at: -time.Hour, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 1500 * ms, cost: 1, want: winTNo(0, 3, 0, 500*ms, 500*ms)},
			{at: 1000 * ms, cost: 1, want: winTNo(0, 3, 0, 500*ms, 500*ms)},
			{at: 2 * time.Second, cost: 3, want: winTOK(0, 3, 0, time.Second)},
		}},
		{"undo", one, []winTStep{
			{at: 0, cost: 2, want: winTOK(0, 3, 1, time.Second)},
			{at: 100 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 110 * ms, cost: 1, undo: true},
			{at: 120 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
			{at: 130 * ms, cost: 1, want: winTNo(0, 3, 0, 990*ms, 870*ms)},
			{at: 140 * ms, cost: 1, undo: true}, // of a denial: nothing
			{at: 150 * ms, cost: 1, want: winTNo(0, 3, 0, 970*ms, 850*ms)},
			{at: 200 * ms, cost: 3, want: winTNo(0, 3, 0, 920*ms, 920*ms)},
		}},
		{"large counts", Config{Tiers: []Tier{{1_000_000_000, time.Minute}}}, []winTStep{
			{at: 0, cost: 999_999_999, want: winTOK(0, 1e9, 1, time.Minute)},
			{at: time.Second, cost: 2, want: winTNo(0, 1e9, 1, 59*time.Second, 59*time.Second)},
			{at: 2 * time.Second, cost: 1, want: winTOK(0, 1e9, 0, time.Minute)},
			{at: 61 * time.Second, cost: 1e9, want: winTNo(0, 1e9, 999_999_999, time.Second, time.Second)},
			{at: 62 * time.Second, cost: 1e9, want: winTOK(0, 1e9, 0, time.Minute)},
		}},
	}
	winTRunCases(t, SlidingLog, append(cases, winTCostAboveOneOfTwo, winTCostAboveLimit, winTNegativeCost, winTUndoFloor))
}

func TestSlidingLogCountRejected(t *testing.T) {
	ms := winTms
	one := []Tier{{3, time.Second}}
	base := []winTStep{
		{at: 0, cost: 1, want: winTOK(0, 3, 2, time.Second)},
		{at: 100 * ms, cost: 1, want: winTOK(0, 3, 1, time.Second)},
		{at: 200 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
	}
	// Without: the denial at 0.5s leaves the log alone, 1.05s is admitted.
	// With: the denial at 0.5s is logged (the oldest unit drops out).
	winTCountRejected(t, SlidingLog, one, base, []winTStep{
		{at: 500 * ms, cost: 1, want: winTNo(0, 3, 0, 700*ms, 500*ms)},
		{at: 1050 * ms, cost: 1, want: winTOK(0, 3, 0, time.Second)},
	}, []winTStep{
		{at: 500 * ms, cost: 1, want: winTNo(0, 3, 0, time.Second, 600*ms)},
		{at: 1050 * ms, cost: 1, want: winTNo(0, 3, 0, time.Second, 150*ms)},
		{at: 1101 * ms, cost: 5, want: winTNo(0, 3, 0, time.Second, time.Second)},
		{at: 2100 * ms, cost: 1, want: winTNo(0, 3, 0, time.Second, ms)},
		{at: 3200 * ms, cost: 1, want: winTOK(0, 3, 2, time.Second)},
	})
	// With two tiers, a denial by the first counts in the second too, which
	// then holds the next request longer.
	two := []Tier{{3, time.Second}, {5, 10 * time.Second}}
	winTCountRejected(t, SlidingLog, two, base, []winTStep{
		{at: 500 * ms, cost: 2, want: winTNo(0, 3, 0, 700*ms, 600*ms)},
	}, []winTStep{
		{at: 500 * ms, cost: 2, want: winTNo(1, 5, 0, 10*time.Second, 9600*ms)},
	})
}

// TestSlidingLogBounded checks that a flood of takes at distinct instants
// and of large costs keeps at most Events runs per tier.
func TestSlidingLogBounded(t *testing.T) {
	for _, cr := range []bool{false, true} {
		l := winTNew(t, SlidingLog, Config{Tiers: []Tier{{50, time.Second}, {1e9, time.Hour}}, CountRejected: cr})
		st := l.NewState().(*slidingLogState)
		now := winT0
		for i := range 20000 {
			now = now.Add(time.Duration(1+i%7) * time.Microsecond)
			st.Take(now, int64(1+i%3*1000))
		}
		for i, tr := range st.tiers {
			if int64(len(tr.buf)) > tr.events || int64(tr.size) > tr.count || tr.count > tr.events {
				t.Errorf("cr=%v tier %d: %d runs in %d slots, %d units, events %d", cr, i, tr.size, len(tr.buf), tr.count, tr.events)
			}
		}
	}
}

func TestSlidingLogProperties(t *testing.T) {
	winTRunProperty(t, SlidingLog, newWinTRefLog)
}

func TestSlidingLogNoAlloc(t *testing.T) { winTAllocs(t, SlidingLog) }

func BenchmarkSlidingLog(b *testing.B) { winTBench(b, SlidingLog) }
