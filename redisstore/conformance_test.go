package redisstore

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// The conformance suite: the same timelines, with passed-in times, against
// the memory store (the Go twins) and the Redis store (the Lua twins),
// comparing every field of every decision.

type confCase struct {
	name string
	cfg  algorithms.Config
}

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

func tiers(ts ...algorithms.Tier) []algorithms.Tier { return ts }

// confCases returns the configurations every algorithm is played with
// (those an algorithm refuses, such as burst for sliding_log or two tiers
// for concurrency, are skipped).
func confCases(alg string) []confCase {
	if alg == algorithms.Concurrency {
		return []confCase{
			{"3_per_1s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)})}},
			{"1_per_500ms", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 1, Window: 500 * time.Millisecond})}},
			{"10_per_30s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 10, Window: sec(30)})}},
		}
	}
	cs := []confCase{
		{"3_per_1s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)})}},
		{"3_per_1s+5_per_10s", algorithms.Config{Tiers: tiers(
			algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})}},
		{"3_per_1s+5_per_10s_count_rejected", algorithms.Config{CountRejected: true, Tiers: tiers(
			algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})}},
		{"7_per_3s_count_rejected", algorithms.Config{CountRejected: true, Tiers: tiers(
			algorithms.Tier{Events: 7, Window: sec(3)})}},
		{"10_per_1m+2_per_1500ms+50_per_1h", algorithms.Config{Tiers: tiers(
			algorithms.Tier{Events: 10, Window: time.Minute}, algorithms.Tier{Events: 2, Window: 1500 * time.Millisecond},
			algorithms.Tier{Events: 50, Window: time.Hour})}},
		{"1000_per_1s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 1000, Window: sec(1)})}},
		{"1_per_1ms", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 1, Window: time.Millisecond})}},
		{"999_per_1000001us+3_per_7ms", algorithms.Config{Tiers: tiers(
			algorithms.Tier{Events: 999, Window: 1000001 * time.Microsecond}, algorithms.Tier{Events: 3, Window: 7 * time.Millisecond})}},
		{"5_per_1s+1e12_per_1h_count_rejected", algorithms.Config{CountRejected: true, Tiers: tiers(
			algorithms.Tier{Events: 5, Window: sec(1)}, algorithms.Tier{Events: 1e12, Window: time.Hour})}},
		{"3_per_1d", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: 24 * time.Hour})}},
	}
	if algorithms.UsesBurst(alg) {
		cs = append(cs,
			confCase{"10_per_1m_burst_4", algorithms.Config{Burst: 4, Tiers: tiers(algorithms.Tier{Events: 10, Window: time.Minute})}},
			confCase{"3_per_1s+5_per_10s_burst_6_count_rejected", algorithms.Config{Burst: 6, CountRejected: true, Tiers: tiers(
				algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})}},
			confCase{"7_per_3s_burst_1", algorithms.Config{Burst: 1, Tiers: tiers(algorithms.Tier{Events: 7, Window: sec(3)})}},
		)
	}
	return cs
}

// op is one step of a timeline.
type op struct {
	at   time.Duration // since t0; may go backwards
	key  string
	cost int64
	undo int // > 0: undo the Take of step undo-1 instead of taking
}

// timeline draws a random timeline for cfg: steps forward by a fraction of
// the shortest window (many in the same microsecond), sometimes backwards,
// sometimes a gap longer than the longest window; costs 0, 1, 2, 3 and more
// than any limit; undos of earlier admitted steps.
func timeline(rng *rand.Rand, alg string, cfg algorithms.Config, n int) []op {
	minW, maxW := cfg.Tiers[0].Window, cfg.Tiers[0].Window
	maxE := int64(0)
	for _, t := range cfg.Tiers {
		minW = min(minW, t.Window)
		maxW = max(maxW, t.Window)
		maxE = max(maxE, t.Events, cfg.Burst)
	}
	undoP := 0.1
	if alg == algorithms.Concurrency {
		undoP = 0.35
	}
	keys := []string{"alice", "bob{x}\n"}
	var ops []op
	at := time.Duration(0)
	for len(ops) < n {
		r := rng.Float64()
		switch {
		case r < 0.25: // same microsecond
		case r < 0.30:
			at += time.Microsecond
		case r < 0.75:
			at += time.Duration(rng.Int63n(int64(minW)/3 + 1))
		case r < 0.85:
			at += time.Duration(rng.Int63n(int64(minW)*2 + 1))
		case r < 0.92:
			at -= time.Duration(rng.Int63n(int64(minW) + 1)) // backwards
		case r < 0.96:
			at += maxW + time.Duration(rng.Int63n(int64(maxW)+1)) // long gap
		default:
			at += time.Duration(rng.Int63n(int64(maxW)/2 + 1))
		}
		o := op{at: at, key: keys[rng.Intn(len(keys))]}
		if rng.Float64() < undoP && len(ops) > 0 {
			o.undo = rng.Intn(len(ops)) + 1
			o.key = ops[o.undo-1].key
			o.cost = ops[o.undo-1].cost
		} else {
			c := rng.Float64()
			switch {
			case c < 0.70:
				o.cost = 1
			case c < 0.80:
				o.cost = 2
			case c < 0.87:
				o.cost = 3
			case c < 0.91:
				o.cost = 0
			case c < 0.92:
				o.cost = -1 // counts as 0
			case c < 0.96:
				o.cost = maxE + 1
			default:
				o.cost = 1 + rng.Int63n(maxE+1)
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// diffDecision describes how got differs from want ("" when they agree):
// Allowed, Tier, Limit and Remaining exactly, whether a lease was made
// (Token not 0: the Store makes its own tokens, see newTokens), the durations
// (ResetAfter, MoreAfter, RetryAfter, Delay) within a millisecond (inexact)
// or exactly (exact).
func diffDecision(want, got algorithms.Decision, exact bool) string {
	tol := time.Millisecond
	if exact {
		tol = 0
	}
	far := func(a, b time.Duration) bool {
		d := a - b
		return d > tol || d < -tol
	}
	if want.Allowed != got.Allowed || want.Tier != got.Tier || want.Limit != got.Limit ||
		want.Remaining != got.Remaining || (want.Token == 0) != (got.Token == 0) ||
		far(want.ResetAfter, got.ResetAfter) || far(want.MoreAfter, got.MoreAfter) ||
		far(want.RetryAfter, got.RetryAfter) || far(want.Delay, got.Delay) {
		return fmt.Sprintf("\n\tgo:    %+v\n\tredis: %+v", want, got)
	}
	return ""
}

// playConformance plays every case of every implemented algorithm against
// c, comparing with the Go twin.
func playConformance(t *testing.T, c redis.UniversalClient, steps int) {
	ctx := context.Background()
	for _, alg := range algorithms.Names {
		t.Run(alg, func(t *testing.T) {
			if !implemented(alg) {
				t.Skipf("the Go twin of %s is not implemented yet", alg)
			}
			for ci, cc := range confCases(alg) {
				l, err := limiter(alg, cc.cfg)
				if err != nil {
					t.Logf("%s: %s refuses the config: %v", cc.name, alg, err)
					continue
				}
				t.Run(cc.name, func(t *testing.T) {
					caseUndos := 0
					defer func() {
						if caseUndos == 0 {
							t.Errorf("no undo in any timeline")
						}
					}()
					for seed := int64(1); seed <= 3; seed++ {
						rs := mustStore(t, c, l, fmt.Sprintf("conf-%s-%d-%d-%d", alg, ci, seed, time.Now().UnixNano()))
						// The memory store keeps a key's latest instant until
						// it is swept; Redis until the key expires, in real
						// time. A long margin keeps a slow run (a loaded
						// machine, -race) from expiring a key mid-timeline.
						rs.setMargin(time.Hour)
						rng := rand.New(rand.NewSource(seed*1000 + int64(ci)))
						ops := timeline(rng, alg, cc.cfg, steps)
						// The Go twin through the memory store, as the handler
						// uses it (sweeping off: the timeline's instants are
						// not the wall clock).
						ref := store.NewMemory(l, store.MemoryOptions{SweepInterval: time.Hour})
						defer ref.Destruct()
						p := newPlayer(ops)
						inexact := 0
						for i := range ops {
							want, got, taken, err := p.play(ctx, ref, rs, i)
							if err != nil {
								t.Fatalf("seed %d step %d: %v", seed, i, err)
							}
							if !taken {
								continue
							}
							if d := diffDecision(want, got, false); d != "" {
								t.Fatalf("seed %d %s", seed, p.differ(i, "", d))
							}
							if diffDecision(want, got, true) != "" {
								inexact++
							}
						}
						if inexact > 0 {
							t.Logf("seed %d: %d decisions differ by less than 1ms", seed, inexact)
						}
						// A timeline that never admits, never denies or never
						// undoes tests less than it seems to.
						if p.allowed == 0 || p.denied == 0 {
							t.Errorf("seed %d: a weak timeline: %d allowed, %d denied", seed, p.allowed, p.denied)
						}
						caseUndos += p.undos
						totals.Add(int64(p.allowed+p.denied), int64(p.undos))
					}
				})
			}
		})
	}
}

// stepped is what playStep did.
type stepped uint8

const (
	stepSkipped stepped = iota // an undo of a step that admitted nothing, or was undone
	stepUndone
	stepTaken
)

// playStep plays step i of ops on the memory store ref and the Redis store
// rs: an undo of an earlier admitted step (once), or a Take, whose two
// decisions it returns (and records ref's in decs, the token of rs's in
// toks: an undo gives each store its own).
func playStep(ctx context.Context, ref, rs store.Store, ops []op, decs []algorithms.Decision, toks []uint64, undone []bool, i int) (want, got algorithms.Decision, s stepped, err error) {
	o := ops[i]
	now := t0.Add(o.at)
	if o.undo > 0 {
		j := o.undo - 1
		if undone[j] || !decs[j].Allowed {
			return want, got, stepSkipped, nil
		}
		undone[j] = true
		if err := ref.Undo(ctx, o.key, now, o.cost, decs[j]); err != nil {
			return want, got, stepUndone, err
		}
		if err := rs.Undo(ctx, o.key, now, o.cost, withToken(decs[j], toks[j])); err != nil {
			return want, got, stepUndone, fmt.Errorf("Undo: %w", err)
		}
		return want, got, stepUndone, nil
	}
	if want, err = ref.Take(ctx, o.key, now, o.cost); err != nil {
		return want, got, stepTaken, err
	}
	decs[i] = want
	if got, err = rs.Take(ctx, o.key, now, o.cost); err != nil {
		return want, got, stepTaken, fmt.Errorf("Take: %w", err)
	}
	toks[i] = got.Token
	return want, got, stepTaken, nil
}

// withToken returns d with token: the Redis store's own for d's lease.
func withToken(d algorithms.Decision, token uint64) algorithms.Decision {
	d.Token = token
	return d
}

// player plays a timeline of ops step by step (playStep) and counts what
// its steps did: a timeline that never admits, never denies or never
// undoes tests less than it seems to.
type player struct {
	ops                    []op
	decs                   []algorithms.Decision
	toks                   []uint64
	undone                 []bool
	allowed, denied, undos int
}

func newPlayer(ops []op) *player {
	return &player{ops: ops, decs: make([]algorithms.Decision, len(ops)), toks: make([]uint64, len(ops)), undone: make([]bool, len(ops))}
}

// play plays step i on the memory store ref and the Redis store rs, and
// returns their decisions and whether the step was a Take.
func (p *player) play(ctx context.Context, ref, rs store.Store, i int) (want, got algorithms.Decision, taken bool, err error) {
	want, got, step, err := playStep(ctx, ref, rs, p.ops, p.decs, p.toks, p.undone, i)
	if err != nil {
		return want, got, false, err
	}
	switch {
	case step == stepUndone:
		p.undos++
	case step == stepTaken && want.Allowed:
		p.allowed++
	case step == stepTaken:
		p.denied++
	}
	return want, got, step == stepTaken, nil
}

// differ is the failure message of step i, whose decisions differ by d
// (diffDecision), with more said about the step, and the last steps.
func (p *player) differ(i int, more, d string) string {
	o := p.ops[i]
	return fmt.Sprintf("step %d (at t0%+v key %q cost %d%s): decisions differ:%s\n%s", i, o.at, o.key, o.cost, more, d, history(p.ops[:i+1], p.decs))
}

// history renders the last steps of a timeline for a failure message.
func history(ops []op, decs []algorithms.Decision) string {
	s := ""
	from := max(0, len(ops)-12)
	for i := from; i < len(ops); i++ {
		o := ops[i]
		if o.undo > 0 {
			s += fmt.Sprintf("\t%3d at %v %q undo step %d\n", i, o.at, o.key, o.undo-1)
		} else {
			s += fmt.Sprintf("\t%3d at %v %q cost %d -> %+v\n", i, o.at, o.key, o.cost, decs[i])
		}
	}
	return s
}

// confTotals counts what a conformance run compared.
type confTotals struct{ takes, undos atomic.Int64 }

func (c *confTotals) Add(takes, undos int64) { c.takes.Add(takes); c.undos.Add(undos) }

var totals confTotals

func TestConformance(t *testing.T) {
	_, c := newClient(t)
	totals = confTotals{}
	playConformance(t, c, 300)
	t.Logf("single redis-server: %d Takes and %d Undos compared", totals.takes.Load(), totals.undos.Load())
}

// TestCluster plays the conformance suite against a 6-node Redis Cluster
// (3 masters, 3 replicas), then keys full of braces, newlines and length,
// which must never answer CROSSSLOT.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no cluster")
	}
	_, c := newClusterClient(t, 1)
	t.Run("conformance", func(t *testing.T) {
		totals = confTotals{}
		playConformance(t, c, 120)
		t.Logf("cluster: %d Takes and %d Undos compared", totals.takes.Load(), totals.undos.Load())
	})
	t.Run("no_crossslot", func(t *testing.T) {
		ctx := context.Background()
		keys := []string{"", "plain", "{", "}", "{}", "}{", "a{b}c", "{x}{y}", "line\nbreak\r\n", "x\ny{",
			strings.Repeat("{", 50), strings.Repeat("k", 129), strings.Repeat("}\n", 300), "\x00\xff%7B"}
		cfg := algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)},
			algorithms.Tier{Events: 9, Window: time.Minute})}
		for _, alg := range algorithms.Names {
			cfg := cfg
			if alg == algorithms.Concurrency {
				cfg.Tiers = cfg.Tiers[:1]
			}
			l := mustLimiter(t, alg, cfg)
			s := mustStore(t, c, l, "cross{slot}\n")
			for _, k := range keys {
				d, err := s.Take(ctx, k, time.Time{}, 1)
				if err != nil {
					t.Fatalf("%s: Take(%q): %v", alg, k, err)
				}
				if err := s.Undo(ctx, k, time.Time{}, 1, d); err != nil {
					t.Fatalf("%s: Undo(%q): %v", alg, k, err)
				}
				slot := int64(-1)
				for _, rk := range s.Keys(k) {
					n, err := c.ClusterKeySlot(ctx, rk).Result()
					if err != nil {
						t.Fatal(err)
					}
					if slot >= 0 && n != slot {
						t.Fatalf("%s: keys of %q in slots %d and %d", alg, k, slot, n)
					}
					slot = n
				}
			}
		}
	})
}

// TestConformanceHandwritten plays short timelines written out by hand, so
// that the basic shapes (fill, deny, refill, same instant, time backwards,
// long gap, undo) are covered whatever the random ones draw.
func TestConformanceHandwritten(t *testing.T) {
	_, c := newClient(t)
	ctx := context.Background()
	ms := time.Millisecond
	timelines := [][]op{
		// Fill 3/1s in one microsecond, deny, step back, then a long gap.
		{{0, "k", 1, 0}, {0, "k", 1, 0}, {0, "k", 1, 0}, {0, "k", 1, 0}, {-500 * ms, "k", 1, 0},
			{999 * ms, "k", 1, 0}, {1000 * ms, "k", 1, 0}, {1001 * ms, "k", 2, 0}, {5 * sec(60), "k", 1, 0}},
		// Costs: 2, more than any limit, 0, undo.
		{{0, "k", 2, 0}, {ms, "k", 100, 0}, {2 * ms, "k", 0, 0}, {3 * ms, "k", 1, 0}, {4 * ms, "k", 1, 0},
			{5 * ms, "k", 2, 1}, {6 * ms, "k", 2, 0}, {7 * ms, "k", 1, 0}, {8 * ms, "k", 1, 5}, {9 * ms, "k", 1, 0}},
		// Steady drip at the rate, then a burst.
		{{0, "k", 1, 0}, {333 * ms, "k", 1, 0}, {666 * ms, "k", 1, 0}, {999 * ms, "k", 1, 0}, {1333 * ms, "k", 1, 0},
			{1334 * ms, "k", 1, 0}, {1335 * ms, "k", 1, 0}, {1336 * ms, "k", 1, 0}, {1337 * ms, "k", 1, 0}},
	}
	cfgs := []algorithms.Config{
		{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)})},
		{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})},
		{CountRejected: true, Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})},
	}
	for _, alg := range algorithms.Names {
		if !implemented(alg) {
			t.Logf("%s: Go twin not implemented yet", alg)
			continue
		}
		for ci, cfg := range cfgs {
			l, err := limiter(alg, cfg)
			if err != nil {
				continue
			}
			for ti, ops := range timelines {
				rs := mustStore(t, c, l, fmt.Sprintf("hand-%s-%d-%d", alg, ci, ti))
				rs.setMargin(time.Hour)
				st := l.NewState()
				decs := make([]algorithms.Decision, len(ops))
				toks := make([]uint64, len(ops))
				for i, o := range ops {
					now := t0.Add(o.at)
					if o.undo > 0 {
						d := decs[o.undo-1]
						if !d.Allowed {
							continue
						}
						st.Undo(now, o.cost, d)
						if err := rs.Undo(ctx, o.key, now, o.cost, withToken(d, toks[o.undo-1])); err != nil {
							t.Fatal(err)
						}
						continue
					}
					want := st.Take(now, o.cost)
					got, err := rs.Take(ctx, o.key, now, o.cost)
					if err != nil {
						t.Fatal(err)
					}
					decs[i], toks[i] = want, got.Token
					if d := diffDecision(want, got, false); d != "" {
						t.Errorf("%s cfg %d timeline %d step %d: decisions differ:%s\n%s", alg, ci, ti, i, d, history(ops[:i+1], decs))
						break
					}
				}
			}
		}
	}
}
