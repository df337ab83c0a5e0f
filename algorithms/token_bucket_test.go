package algorithms

import (
	"fmt"
	"math/big"
	"math/rand"
	"testing"
	"time"
)

// Helpers shared by the tests of token_bucket, leaky_bucket, gcra and
// concurrency carry the prefix bktT.

var bktT0 = time.Unix(1_700_000_000, 0)

const (
	bktTms = time.Millisecond
	bktTus = time.Microsecond
)

func bktTNew(t testing.TB, name string, cfg Config) Limiter {
	t.Helper()
	l, err := New(name, cfg)
	if err != nil {
		t.Fatalf("New(%s, %+v): %v", name, cfg, err)
	}
	return l
}

// bktTStep is one event of a timeline at bktT0+at.
type bktTStep struct {
	at   time.Duration
	op   string // "take" (default), "undo" (the decision of step ref), "idle", "busy"
	cost int64
	ref  int
	want Decision // for take: every field but Token and MoreAfter (see TestMoreAfter) is compared
}

func bktTRun(t *testing.T, l Limiter, steps []bktTStep) []Decision {
	t.Helper()
	s := l.NewState()
	got := make([]Decision, len(steps))
	for i, st := range steps {
		now := bktT0.Add(st.at)
		switch st.op {
		case "", "take":
			d := s.Take(now, st.cost)
			got[i] = d
			d.Token, d.MoreAfter = 0, 0
			if d != st.want {
				t.Errorf("step %d: Take(t0+%v, %d)\n got %+v\nwant %+v", i, st.at, st.cost, d, st.want)
			}
		case "undo":
			s.Undo(now, st.cost, got[st.ref])
		case "idle", "busy":
			if idle := s.Idle(now); idle != (st.op == "idle") {
				t.Errorf("step %d: Idle(t0+%v) = %v, want %v", i, st.at, idle, !idle)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, st.op)
		}
	}
	return got
}

// bktTAllow and bktTDeny build expected decisions.
func bktTAllow(tier int, limit, remaining int64, reset time.Duration) Decision {
	return Decision{Allowed: true, Tier: tier, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func bktTDeny(tier int, limit, remaining int64, reset, retry time.Duration) Decision {
	return Decision{Tier: tier, Limit: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

func bktTDelay(d Decision, delay time.Duration) Decision {
	d.Delay = delay
	return d
}

// bktTCase is a timeline of a bucket algorithm (or concurrency).
type bktTCase = timeline[bktTStep]

func bktTRunCases(t *testing.T, name string, cases []bktTCase) {
	runTimelines(t, cases, func(t *testing.T, cfg Config, steps []bktTStep) { bktTRun(t, bktTNew(t, name, cfg), steps) })
}

// Timelines that token_bucket and gcra (and, where said, leaky_bucket and
// concurrency) decide alike.
var (
	bktTFivePerSecond = bktTCase{"five per second", Config{Tiers: []Tier{{5, time.Second}}}, []bktTStep{
		{op: "idle"},
		{cost: 1, want: bktTAllow(0, 5, 4, 200*bktTms)},
		{cost: 1, want: bktTAllow(0, 5, 3, 400*bktTms)},
		{cost: 1, want: bktTAllow(0, 5, 2, 600*bktTms)},
		{cost: 1, want: bktTAllow(0, 5, 1, 800*bktTms)},
		{cost: 1, want: bktTAllow(0, 5, 0, time.Second)},
		{cost: 1, want: bktTDeny(0, 5, 0, time.Second, 200*bktTms)},
		{op: "busy"},
		{at: 200*bktTms - bktTus, cost: 1, want: bktTDeny(0, 5, 0, 800*bktTms+bktTus, bktTus)},
		{at: 200 * bktTms, cost: 1, want: bktTAllow(0, 5, 0, time.Second)},
		{at: 500 * bktTms, cost: 1, want: bktTAllow(0, 5, 0, 900*bktTms)},
		{at: 1400*bktTms - bktTus, op: "busy"},
		{at: 1400 * bktTms, op: "idle"},
		{at: 10 * time.Second, cost: 1, want: bktTAllow(0, 5, 4, 200*bktTms)},
	}}
	bktTBurstAbove = bktTCase{"burst above events", Config{Tiers: []Tier{{5, time.Second}}, Burst: 10}, []bktTStep{
		{cost: 10, want: bktTAllow(0, 10, 0, 2*time.Second)},
		{cost: 1, want: bktTDeny(0, 10, 0, 2*time.Second, 200*bktTms)},
		{at: time.Second, cost: 5, want: bktTAllow(0, 10, 0, 2*time.Second)},
	}}
	bktTBurstBelow = bktTCase{"burst below events", Config{Tiers: []Tier{{10, time.Second}}, Burst: 2}, []bktTStep{
		{cost: 1, want: bktTAllow(0, 2, 1, 100*bktTms)},
		{cost: 1, want: bktTAllow(0, 2, 0, 200*bktTms)},
		{cost: 1, want: bktTDeny(0, 2, 0, 200*bktTms, 100*bktTms)},
		{at: 150 * bktTms, cost: 1, want: bktTAllow(0, 2, 0, 150*bktTms)},
	}}
	bktTCostAboveOne = bktTCase{"cost above one", Config{Tiers: []Tier{{5, time.Second}}}, []bktTStep{
		{cost: 3, want: bktTAllow(0, 5, 2, 600*bktTms)},
		{cost: 3, want: bktTDeny(0, 5, 2, 600*bktTms, 200*bktTms)},
		{cost: 2, want: bktTAllow(0, 5, 0, time.Second)},
		{at: 100 * bktTms, cost: 0, want: bktTAllow(0, 5, 0, 900*bktTms)},
	}}
	bktTBackwards = bktTCase{"time going backwards", Config{Tiers: []Tier{{1, time.Second}}}, []bktTStep{
		{at: 10 * time.Second, cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
		{at: 0, cost: 1, want: bktTDeny(0, 1, 0, time.Second, time.Second)},
		{at: 9 * time.Second, op: "busy"},
		{at: 10*time.Second + 500*bktTms, cost: 1, want: bktTDeny(0, 1, 0, 500*bktTms, 500*bktTms)},
		{at: 10 * time.Second, cost: 1, want: bktTDeny(0, 1, 0, 500*bktTms, 500*bktTms)},
		{at: 11 * time.Second, cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
	}}
	bktTCountRejected = bktTCase{"count rejected", Config{Tiers: []Tier{{1, time.Second}}, CountRejected: true}, []bktTStep{
		{cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
		{cost: 1, want: bktTDeny(0, 1, 0, 2*time.Second, 2*time.Second)},
		{cost: 1, want: bktTDeny(0, 1, 0, 2*time.Second, 2*time.Second)}, // clamped at one capacity below empty
		{cost: 0, want: bktTDeny(0, 1, 0, 2*time.Second, time.Second)},   // in debt: even cost 0 waits
		{at: 2*time.Second - bktTus, op: "busy"},
		{at: 2 * time.Second, cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
		{at: 3 * time.Second, cost: 9, want: bktTDeny(0, 1, 0, 2*time.Second, time.Second)},
	}}
	bktTCountRejectedTiers = bktTCase{"count rejected, tiers", Config{Tiers: []Tier{{1, time.Second}, {10, time.Second}}, CountRejected: true}, []bktTStep{
		{cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
		{cost: 1, want: bktTDeny(0, 1, 0, 2*time.Second, 2*time.Second)},
		{at: 2 * time.Second, cost: 1, want: bktTAllow(0, 1, 0, time.Second)},
	}}
	bktTUndo = bktTCase{"undo", Config{Tiers: []Tier{{2, time.Second}}}, []bktTStep{
		{cost: 1, want: bktTAllow(0, 2, 1, 500*bktTms)},
		{cost: 1, want: bktTAllow(0, 2, 0, time.Second)},
		{cost: 1, want: bktTDeny(0, 2, 0, time.Second, 500*bktTms)},
		{op: "undo", cost: 1, ref: 2}, // denied: nothing to give back
		{cost: 1, want: bktTDeny(0, 2, 0, time.Second, 500*bktTms)},
		{op: "undo", cost: 1, ref: 1},
		{cost: 1, want: bktTAllow(0, 2, 0, time.Second)},
		{at: 400 * bktTms, op: "undo", cost: 1, ref: 6},
		{at: 400 * bktTms, cost: 0, want: bktTAllow(0, 2, 1, 100*bktTms)},
		{at: 2 * time.Second, op: "undo", cost: 1, ref: 0}, // already full: capped
		{at: 2 * time.Second, op: "idle"},
		{at: 2 * time.Second, cost: 2, want: bktTAllow(0, 2, 0, time.Second)},
	}}
)

func TestBktTokenBucket(t *testing.T) {
	sec := time.Second
	five := Config{Tiers: []Tier{{5, sec}}}
	cases := []bktTCase{
		{"cost above capacity", five, []bktTStep{
			{cost: 6, want: bktTDeny(0, 5, 5, 0, sec)},
			{cost: 5, want: bktTAllow(0, 5, 0, sec)},
			{cost: 1 << 62, want: bktTDeny(0, 5, 0, sec, sec)},
		}},
		{"tiers", Config{Tiers: []Tier{{2, sec}, {3, 10 * sec}}}, []bktTStep{
			{cost: 1, want: bktTAllow(0, 2, 1, 500*bktTms)},
			{cost: 1, want: bktTAllow(0, 2, 0, sec)},
			// tier 1 would admit; tier 0 refuses and nothing is consumed.
			{cost: 1, want: bktTDeny(0, 2, 0, sec, 500*bktTms)},
			{at: sec, cost: 1, want: bktTAllow(1, 3, 0, 9*sec)},
			// tier 1 holds 0.3 tokens: (1-0.3)/0.3 s, rounded up.
			{at: sec, cost: 1, want: bktTDeny(1, 3, 0, 9*sec, 2333334*bktTus)},
			{at: sec + 2333333*bktTus, cost: 1, want: bktTDeny(1, 3, 0, 6666667*bktTus, bktTus)},
			{at: sec + 2333334*bktTus, cost: 1, want: bktTAllow(1, 3, 0, 10*sec)},
		}},
		{"tiers, cost above one tier's capacity", Config{Tiers: []Tier{{2, sec}, {3, 10 * sec}}}, []bktTStep{
			{cost: 3, want: bktTDeny(0, 2, 2, 0, sec)},
		}},
		{"a billion per second", Config{Tiers: []Tier{{1e9, sec}}}, []bktTStep{
			{cost: 1e9, want: bktTAllow(0, 1e9, 0, sec)},
			{cost: 1, want: bktTDeny(0, 1e9, 0, sec, bktTus)},
			{at: bktTus, cost: 1000, want: bktTAllow(0, 1e9, 0, sec)},
			{at: 2 * bktTus, cost: 999, want: bktTAllow(0, 1e9, 1, sec)},
		}},
		{"a billion per hour", Config{Tiers: []Tier{{1e9, time.Hour}}}, []bktTStep{
			// 5 sub-units per µs, 18 per token: a token every 3.6µs.
			{cost: 1e9 - 1, want: bktTAllow(0, 1e9, 1, 3599999997*bktTus)},
			{cost: 2, want: bktTDeny(0, 1e9, 1, 3599999997*bktTus, 4*bktTus)},
		}},
	}
	bktTRunCases(t, TokenBucket, append(cases, bktTFivePerSecond, bktTBurstAbove, bktTBurstBelow, bktTCostAboveOne, bktTBackwards, bktTCountRejected, bktTCountRejectedTiers, bktTUndo))
}

func TestBktBucketParams(t *testing.T) {
	cases := []struct {
		tier                Tier
		burst               int64
		rate, scale, capac  int64
		wantErr, wantApprox bool
	}{
		{Tier{5, time.Second}, 0, 1, 200000, 1000000, false, false},
		{Tier{3, 10 * time.Second}, 0, 3, 10000000, 30000000, false, false},
		{Tier{1e9, time.Second}, 0, 1000, 1, 1e9, false, false},
		{Tier{100, time.Minute}, 500, 1, 600000, 300000000, false, false},
		{Tier{1000003, 24 * time.Hour}, 0, 0, 0, 0, false, true}, // prime events, long window
		{Tier{16001, 48 * time.Hour}, 0, 0, 0, 0, false, true},
		{Tier{1e9, 24 * time.Hour}, 0, 0, 0, 0, false, true},
		{Tier{5, 250 * 365 * 24 * time.Hour}, 0, 0, 0, 0, true, false},
		{Tier{1000, 250 * 365 * 24 * time.Hour}, 1e9, 0, 0, 0, true, false},
	}
	for _, c := range cases {
		rate, scale, capac, err := BucketParams(c.tier, c.burst)
		if (err != nil) != c.wantErr {
			t.Errorf("%v burst %d: err %v", c.tier, c.burst, err)
			continue
		}
		if err != nil {
			continue
		}
		if capac > bktMaxParam {
			t.Errorf("%v: capacity %d beyond 2^50", c.tier, capac)
		}
		if c.wantApprox {
			// Never faster than configured, and within 0.2%.
			exact := new(big.Rat).SetFrac64(c.tier.Events, c.tier.Window.Microseconds())
			got := new(big.Rat).SetFrac64(rate, scale)
			if got.Cmp(exact) > 0 {
				t.Errorf("%v: rate %d/%d faster than %v", c.tier, rate, scale, exact)
			}
			lo := new(big.Rat).Mul(exact, big.NewRat(998, 1000))
			if got.Cmp(lo) < 0 {
				t.Errorf("%v: rate %d/%d too slow", c.tier, rate, scale)
			}
			continue
		}
		if rate != c.rate || scale != c.scale || capac != c.capac {
			t.Errorf("%v burst %d: got %d %d %d, want %d %d %d", c.tier, c.burst, rate, scale, capac, c.rate, c.scale, c.capac)
		}
	}
}

// TestBktTokenBucketModel plays random timelines against an exact rational
// model of the token bucket.
func TestBktTokenBucketModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 200; n++ {
		cfg := bktTRandConfig(rng)
		l := bktTNew(t, TokenBucket, cfg)
		s := l.NewState()
		type tier struct {
			tok, rate, capac *big.Rat
		}
		m := make([]tier, len(cfg.Tiers))
		for i, tr := range cfg.Tiers {
			b := cfg.Burst
			if b == 0 {
				b = tr.Events
			}
			m[i] = tier{new(big.Rat).SetInt64(b), big.NewRat(tr.Events, tr.Window.Microseconds()), new(big.Rat).SetInt64(b)}
		}
		var last int64
		for step := 0; step < 100; step++ {
			at, cost := bktTRandStep(rng, cfg, last)
			now := bktT0.UnixMicro() + at
			if at > last {
				for i := range m {
					add := new(big.Rat).Mul(m[i].rate, new(big.Rat).SetInt64(at-last))
					m[i].tok.Add(m[i].tok, add)
					if m[i].tok.Cmp(m[i].capac) > 0 {
						m[i].tok.Set(m[i].capac)
					}
				}
				last = at
			}
			allowed := true
			for i := range m {
				if m[i].tok.Cmp(new(big.Rat).SetInt64(cost)) < 0 || m[i].capac.Cmp(new(big.Rat).SetInt64(cost)) < 0 {
					allowed = false
				}
			}
			if allowed || cfg.CountRejected {
				for i := range m {
					m[i].tok.Sub(m[i].tok, new(big.Rat).SetInt64(cost))
					if neg := new(big.Rat).Neg(m[i].capac); m[i].tok.Cmp(neg) < 0 {
						m[i].tok.Set(neg)
					}
				}
			}
			d := s.Take(time.UnixMicro(now), cost)
			if d.Allowed != allowed {
				t.Fatalf("config %d %+v step %d: allowed %v, model %v", n, cfg, step, d.Allowed, allowed)
			}
			fl := new(big.Int).Quo(m[d.Tier].tok.Num(), m[d.Tier].tok.Denom()) // truncates toward zero
			if m[d.Tier].tok.Sign() < 0 {
				fl.SetInt64(0)
			}
			if d.Remaining != fl.Int64() {
				t.Fatalf("config %d %+v step %d: remaining %d, model %v", n, cfg, step, d.Remaining, m[d.Tier].tok.FloatString(3))
			}
		}
	}
}

func bktTRandConfig(rng *rand.Rand) Config {
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second, time.Minute}
	cfg := Config{Tiers: make([]Tier, 1+rng.Intn(3))}
	for i := range cfg.Tiers {
		cfg.Tiers[i] = Tier{Events: 1 + rng.Int63n(20), Window: windows[rng.Intn(len(windows))]}
	}
	if rng.Intn(3) == 0 {
		cfg.Burst = 1 + rng.Int63n(30)
	}
	cfg.CountRejected = rng.Intn(4) == 0
	return cfg
}

// bktTRandStep returns the next instant (µs after bktT0, sometimes before
// the last one) and cost of a random timeline.
func bktTRandStep(rng *rand.Rand, cfg Config, last int64) (int64, int64) {
	w := cfg.Tiers[rng.Intn(len(cfg.Tiers))].Window.Microseconds()
	at := last
	switch r := rng.Intn(10); {
	case r < 3: // same instant
	case r < 4 && last > 0: // backwards
		at = last - rng.Int63n(w+1)
	default:
		at = last + rng.Int63n(w/3+1)
	}
	cost := int64(1)
	switch r := rng.Intn(10); {
	case r < 2:
		cost = 1 + rng.Int63n(4)
	case r < 3:
		cost = rng.Int63n(40)
	}
	return at, cost
}

type bktTOp struct {
	at   int64 // µs after bktT0
	cost int64
}

// bktTReplay builds the state ops leave behind.
func bktTReplay(l Limiter, ops []bktTOp) State {
	s := l.NewState()
	for _, o := range ops {
		s.Take(bktT0.Add(time.Duration(o.at)*bktTus), o.cost)
	}
	return s
}

// bktTRandLimiters calls f with 60 random configurations for name, drawn
// from seed, and their Limiters.
func bktTRandLimiters(t *testing.T, name string, seed int64, f func(rng *rand.Rand, n int, cfg Config, l Limiter)) {
	rng := rand.New(rand.NewSource(seed))
	for n := 0; n < 60; n++ {
		cfg := bktTRandConfig(rng)
		f(rng, n, cfg, bktTNew(t, name, cfg))
	}
}

// bktTWalk runs a random timeline of 40 steps (bktTRandStep) on every
// limiter of bktTRandLimiters(name, seed) and calls check after each Take
// with the decision, its cost, the latest instant seen and the ops so far
// (µs after bktT0; see bktTReplay), and the step described for a failure.
func bktTWalk(t *testing.T, name string, seed int64, check func(cfg Config, l Limiter, ops []bktTOp, seen, cost int64, d Decision, where string)) {
	bktTRandLimiters(t, name, seed, func(rng *rand.Rand, n int, cfg Config, l Limiter) {
		s := l.NewState()
		var ops []bktTOp
		var last, seen int64
		for step := 0; step < 40; step++ {
			at, cost := bktTRandStep(rng, cfg, last)
			last = at
			seen = max(seen, at)
			d := s.Take(bktT0.Add(time.Duration(at)*bktTus), cost)
			ops = append(ops, bktTOp{at, cost})
			check(cfg, l, ops, seen, cost, d, fmt.Sprintf("%s config %d %+v step %d cost %d: %+v", name, n, cfg, step, cost, d))
		}
	})
}

// bktTFirstAt fails the test unless, after ops, cost units are admitted at
// at (µs after bktT0) and refused 1µs earlier; what names that instant.
func bktTFirstAt(t *testing.T, l Limiter, ops []bktTOp, at, cost int64, where, what string) {
	t.Helper()
	if d2 := bktTReplay(l, ops).Take(bktT0.Add(time.Duration(at)*bktTus), cost); !d2.Allowed {
		t.Fatalf("%s: %d units refused at %s: %+v", where, cost, what, d2)
	}
	if d2 := bktTReplay(l, ops).Take(bktT0.Add(time.Duration(at-1)*bktTus), cost); d2.Allowed {
		t.Fatalf("%s: %d units admitted 1µs before %s", where, cost, what)
	}
}

// bktTRetryProperty checks on random timelines that a denied request of the
// same cost is admitted at exactly RetryAfter and not one µs earlier, and
// that every decision is well formed.
func bktTRetryProperty(t *testing.T, name string, seed int64) {
	checked := 0
	bktTWalk(t, name, seed, func(cfg Config, l Limiter, ops []bktTOp, seen, cost int64, d Decision, where string) {
		if d.Remaining < 0 || d.Remaining > d.Limit || d.ResetAfter < 0 || d.Tier < 0 || d.Tier >= len(cfg.Tiers) {
			t.Fatalf("%s: malformed", where)
		}
		if d.Allowed {
			if d.RetryAfter != 0 {
				t.Fatalf("%s: allowed with a RetryAfter", where)
			}
			return
		}
		if d.RetryAfter <= 0 || d.RetryAfter%bktTus != 0 {
			t.Fatalf("%s: denied without a RetryAfter in µs", where)
		}
		b := cfg.Burst
		if b == 0 {
			b = cfg.Tiers[d.Tier].Events
		}
		if cost > b {
			if d.RetryAfter != cfg.Tiers[d.Tier].Window {
				t.Fatalf("%s: cost above capacity, want RetryAfter %v", where, cfg.Tiers[d.Tier].Window)
			}
			return
		}
		checked++
		bktTFirstAt(t, l, ops, seen+int64(d.RetryAfter/bktTus), cost, where, "RetryAfter")
	})
	if checked < 100 {
		t.Fatalf("only %d denials checked", checked)
	}
}

func TestBktTokenBucketRetryAfter(t *testing.T) { bktTRetryProperty(t, TokenBucket, 2) }

// bktTNoAlloc checks that Take and Undo allocate nothing.
func bktTNoAlloc(t *testing.T, name string, cfg Config) {
	s := bktTNew(t, name, cfg).NewState()
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		i++
		now := bktT0.Add(time.Duration(i) * 100 * bktTus)
		d := s.Take(now, 1)
		if i%3 == 0 {
			s.Undo(now, 1, d)
		}
		s.Idle(now)
	})
	if n != 0 {
		t.Errorf("%s: %v allocations per Take", name, n)
	}
}

func TestBktNoAlloc(t *testing.T) {
	for _, name := range []string{TokenBucket, LeakyBucket, GCRA} {
		bktTNoAlloc(t, name, Config{Tiers: []Tier{{100, time.Second}, {1000, time.Minute}}})
	}
	bktTNoAlloc(t, Concurrency, Config{Tiers: []Tier{{50, time.Second}}})
}

// bktTBench runs Take on one state per goroutine with time moving at 1µs
// per call, against a limit of 100/s (mostly denials) or 1e9/s (admits).
func bktTBench(b *testing.B, name string, cfg Config) {
	b.Run("serial", func(b *testing.B) {
		s := bktTNew(b, name, cfg).NewState()
		b.ReportAllocs()
		now := bktT0
		for i := 0; i < b.N; i++ {
			now = now.Add(bktTus)
			if d := s.Take(now, 1); d.Token != 0 {
				s.Undo(now, 1, d)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := bktTNew(b, name, cfg)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := l.NewState()
			now := bktT0
			for pb.Next() {
				now = now.Add(bktTus)
				if d := s.Take(now, 1); d.Token != 0 {
					s.Undo(now, 1, d)
				}
			}
		})
	})
}

// bktTBenchTiers benchmarks name with one tier of 100/s, and with the tiers
// of three.
func bktTBenchTiers(b *testing.B, name string, three ...Tier) {
	b.Run("1tier", func(b *testing.B) { bktTBench(b, name, Config{Tiers: []Tier{{100, time.Second}}}) })
	b.Run("3tiers", func(b *testing.B) { bktTBench(b, name, Config{Tiers: three}) })
}

func BenchmarkBktTokenBucket(b *testing.B) {
	bktTBenchTiers(b, TokenBucket, Tier{1e9, time.Second}, Tier{1e8, time.Minute}, Tier{1e9, time.Hour})
}

// bktTUndoProperty checks on random timelines that Take then Undo leaves a
// state that decides like one that never saw the Take.
func bktTUndoProperty(t *testing.T, name string, seed int64) {
	undone := 0
	bktTRandLimiters(t, name, seed, func(rng *rand.Rand, n int, cfg Config, l Limiter) {
		var ops []bktTOp
		var last int64
		for step := 0; step < 30; step++ {
			at, cost := bktTRandStep(rng, cfg, last)
			last = at
			ops = append(ops, bktTOp{at, cost})
			if rng.Intn(3) != 0 {
				continue
			}
			with := bktTReplay(l, ops)
			without := bktTReplay(l, ops)
			at2, cost2 := bktTRandStep(rng, cfg, last)
			d := with.Take(bktT0.Add(time.Duration(at2)*bktTus), cost2)
			if !d.Allowed {
				continue
			}
			undone++
			at3 := at2 + rng.Int63n(cfg.Tiers[0].Window.Microseconds()/2+1)
			with.Undo(bktT0.Add(time.Duration(at3)*bktTus), cost2, d)
			for _, probe := range []int64{0, 1, 2} {
				now := bktT0.Add(time.Duration(at3)*bktTus + time.Duration(probe)*bktTms)
				if with.Idle(now) != without.Idle(now) {
					t.Fatalf("%s %+v: Idle differs after Undo", name, cfg)
				}
				if a, b := with.Take(now, probe), without.Take(now, probe); a != b {
					t.Fatalf("%s %+v: Take(%d) after Undo %+v, without the Take %+v", name, cfg, probe, a, b)
				}
			}
		}
	})
	if undone < 50 {
		t.Fatalf("only %d undos checked", undone)
	}
}

func TestBktUndo(t *testing.T) {
	bktTUndoProperty(t, TokenBucket, 5)
	bktTUndoProperty(t, LeakyBucket, 6)
	bktTUndoProperty(t, GCRA, 7)
}

func TestBktLimiter(t *testing.T) {
	huge := Config{Tiers: []Tier{{5, 250 * 365 * 24 * time.Hour}}}
	for _, name := range []string{TokenBucket, LeakyBucket, GCRA, Concurrency} {
		tiers := []Tier{{5, time.Second}}
		l := bktTNew(t, name, Config{Tiers: tiers})
		tiers[0].Events = 1 // the Limiter keeps its own copy
		if l.Name() != name || len(l.Config().Tiers) != 1 || l.Config().Tiers[0] != (Tier{5, time.Second}) {
			t.Errorf("%s: Name %q, Config %+v", name, l.Name(), l.Config())
		}
		s := l.NewState()
		for i := 0; i < 5; i++ {
			if d := s.Take(bktT0, 1); !d.Allowed {
				t.Errorf("%s: request %d denied: %+v", name, i, d)
			}
		}
		if d := s.Take(bktT0, 1); d.Allowed {
			t.Errorf("%s: 6th request admitted: %+v", name, d)
		}
		if name != Concurrency {
			if _, err := New(name, huge); err == nil {
				t.Errorf("%s: %+v accepted", name, huge)
			}
		}
	}
}

func TestTokenBucketHugeBurstIsAnError(t *testing.T) {
	for _, name := range []string{TokenBucket, LeakyBucket} {
		_, err := New(name, Config{Tiers: []Tier{{Events: 1 << 60, Window: time.Second}}})
		if err == nil {
			t.Errorf("%s: capacity 2^60 accepted, want an error", name)
		}
		_, err = New(name, Config{Tiers: []Tier{{Events: 10, Window: time.Second}}, Burst: 1 << 51})
		if err == nil {
			t.Errorf("%s: burst 2^51 accepted, want an error", name)
		}
	}
}
