package conformance

import (
	"math/rand"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// Case is a configuration the suite plays an algorithm with.
type Case struct {
	Name   string
	Config algorithms.Config
}

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

func tiers(ts ...algorithms.Tier) []algorithms.Tier { return ts }

// Cases returns the configurations every algorithm is played with (those
// an algorithm refuses, such as burst for sliding_log, are skipped): an
// algorithm of one tier (concurrency) gets cases of one tier. A new
// algorithm that refuses the common ones gets its own here.
func Cases(alg string) []Case {
	if a, _ := algorithms.Lookup(alg); a.OneTier != "" {
		return []Case{
			{"3_per_1s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 3, Window: sec(1)})}},
			{"1_per_500ms", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 1, Window: 500 * time.Millisecond})}},
			{"10_per_30s", algorithms.Config{Tiers: tiers(algorithms.Tier{Events: 10, Window: sec(30)})}},
		}
	}
	cs := []Case{
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
			Case{"10_per_1m_burst_4", algorithms.Config{Burst: 4, Tiers: tiers(algorithms.Tier{Events: 10, Window: time.Minute})}},
			Case{"3_per_1s+5_per_10s_burst_6_count_rejected", algorithms.Config{Burst: 6, CountRejected: true, Tiers: tiers(
				algorithms.Tier{Events: 3, Window: sec(1)}, algorithms.Tier{Events: 5, Window: sec(10)})}},
			Case{"7_per_3s_burst_1", algorithms.Config{Burst: 1, Tiers: tiers(algorithms.Tier{Events: 7, Window: sec(3)})}},
		)
	}
	return cs
}

// Op is one step of a timeline.
type Op struct {
	At   time.Duration // since the timeline's start (t0); may go backwards
	Key  string
	Cost int64
	Undo int // > 0: undo the Take of step Undo-1 instead of taking
}

// Timeline draws a random timeline of n steps for cfg, a configuration of
// alg: steps forward by a fraction of the shortest window (many in the
// same microsecond), sometimes backwards, sometimes a gap longer than the
// longest window; costs 0, 1, 2, 3 and more than any limit; undos of
// earlier steps (more of them for concurrency, whose undo is the end of a
// request). The same rng state draws the same timeline.
func Timeline(rng *rand.Rand, alg string, cfg algorithms.Config, n int) []Op {
	minW, maxW := cfg.Tiers[0].Window, cfg.Tiers[0].Window
	maxE := int64(0)
	for _, t := range cfg.Tiers {
		minW = min(minW, t.Window)
		maxW = max(maxW, t.Window)
		maxE = max(maxE, t.Events, cfg.Burst)
	}
	undoP := 0.1
	if a, _ := algorithms.Lookup(alg); a.Lease {
		undoP = 0.35 // a lease's give-back: about one a request
	}
	keys := []string{"alice", "bob{x}\n"}
	var ops []Op
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
		o := Op{At: at, Key: keys[rng.Intn(len(keys))]}
		if rng.Float64() < undoP && len(ops) > 0 {
			o.Undo = rng.Intn(len(ops)) + 1
			o.Key = ops[o.Undo-1].Key
			o.Cost = ops[o.Undo-1].Cost
		} else {
			c := rng.Float64()
			switch {
			case c < 0.70:
				o.Cost = 1
			case c < 0.80:
				o.Cost = 2
			case c < 0.87:
				o.Cost = 3
			case c < 0.91:
				o.Cost = 0
			case c < 0.92:
				o.Cost = -1 // counts as 0
			case c < 0.96:
				o.Cost = maxE + 1
			default:
				o.Cost = 1 + rng.Int63n(maxE+1)
			}
		}
		ops = append(ops, o)
	}
	return ops
}
