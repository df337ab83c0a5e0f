package redisstore

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// leaseOp is one Take of a played history: cost units at an offset (µs)
// from the history's start.
type leaseOp struct{ at, cost int64 }

// leaseWaitRun plays histories of one algorithm on one leasing store,
// each on a zone of its own (fresh keys), on a synthetic clock.
type leaseWaitRun struct {
	t     *testing.T
	c     redis.UniversalClient
	l     algorithms.Limiter
	name  string
	dur   time.Duration
	start time.Time
	plays int
}

// play makes a fresh leasing store, plays ops on key "k" and returns the
// store, its clock and the last op's decision.
func (r *leaseWaitRun) play(ops []leaseOp) (*LeaseStore, *storetest.Clock, algorithms.Decision) {
	r.plays++
	clk := storetest.NewClock(r.start)
	s := leaseStores(r.t, r.c, r.l, fmt.Sprintf("wait-%s-%d", r.name, r.plays), 1, r.dur, clk)[0]
	var d algorithms.Decision
	for _, op := range ops {
		d = r.take(s, clk, op.at, op.cost)
	}
	return s, clk, d
}

// take makes a Take of cost at offset at on s, its clock moved there.
func (r *leaseWaitRun) take(s *LeaseStore, clk *storetest.Clock, at, cost int64) algorithms.Decision {
	r.t.Helper()
	clk.Set(r.start.Add(time.Duration(at) * time.Microsecond))
	d, err := s.Take(context.Background(), "k", clk.Now(), cost)
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// admitted is how many of n Takes of one unit s admits at offset at.
func (r *leaseWaitRun) admitted(s *LeaseStore, clk *storetest.Clock, at, n int64) int64 {
	var got int64
	for range n {
		if r.take(s, clk, at, 1).Allowed {
			got++
		}
	}
	return got
}

// check plays ops and checks the waits of the last decision, d, at
// instant u (the last op's) when nothing else arrives. A denial of cost
// c: at u + RetryAfter the instance admits c units (the wait is never
// early) and a cold instance still refuses them 1µs before (never late).
// An admission of Remaining r: at u + MoreAfter the instance admits r+1
// units, and 1µs before at most r when a script call decided it (from the
// lease, MoreAfter still counts the units used since: late). It reports
// what it checked.
func (r *leaseWaitRun) check(ops []leaseOp) string {
	t := r.t
	t.Helper()
	s, clk, d := r.play(ops)
	last := ops[len(ops)-1]
	u, c := last.at, last.cost
	if !d.Allowed {
		w := d.RetryAfter.Microseconds()
		if !r.take(s, clk, u+w, c).Allowed {
			t.Fatalf("%v: denied with Retry-After %v, still denied then: early", ops, d.RetryAfter)
		}
		if w > 1 {
			_, clk, _ := r.play(ops)
			cold := leaseStores(t, r.c, r.l, fmt.Sprintf("wait-%s-%d", r.name, r.plays), 1, r.dur, clk)[0]
			if r.take(cold, clk, u+w-1, c).Allowed {
				t.Fatalf("%v: denied with Retry-After %v, admitted 1µs before: late", ops, d.RetryAfter)
			}
		}
		return "retry"
	}
	m := d.MoreAfter.Microseconds()
	if m <= 0 {
		return ""
	}
	want := d.Remaining + 1
	if got := r.admitted(s, clk, u+m, want); got < want {
		t.Fatalf("%v: remaining %d, more after %v: %d of %d admitted then: early", ops, d.Remaining, d.MoreAfter, got, want)
	}
	if m > 1 && d.Token == 0 {
		s, clk, _ := r.play(ops)
		if got := r.admitted(s, clk, u+m-1, want); got > d.Remaining {
			t.Fatalf("%v: remaining %d, more after %v: %d admitted 1µs before: late", ops, d.Remaining, d.MoreAfter, got)
		}
	}
	return "more"
}

// TestLeaseWaits: the Retry-After of a leasing store's denial and the
// MoreAfter of its admissions are the instants the instance admits
// again, never earlier, on histories that end anywhere in a window (a
// sliding window's previous count weighing on the next one), with and
// without a lease in hand.
func TestLeaseWaits(t *testing.T) {
	_, c := newClient(t)
	for _, tc := range []struct {
		events   int64
		w, lease time.Duration
	}{
		{3, 4 * time.Second, time.Second},
		// A bucket lends only below its capacity less a lease's
		// refill (LEASE.md): with that refill one unit, a lease taken
		// by the Takes that check MoreAfter costs none of them.
		{10, 2 * time.Second, 200 * time.Millisecond},
		// Leases that end with their window (a bucket lends none).
		{10, 2 * time.Second, 3 * time.Second},
	} {
		w := tc.w
		for name, cfg := range leaseConfigs(tc.events, w) {
			sub := fmt.Sprintf("%s %d per %v lease %v", name, tc.events, w, tc.lease)
			t.Run(sub, func(t *testing.T) {
				r := &leaseWaitRun{t: t, c: c, l: mustLimiter(t, name, cfg), name: strings.ReplaceAll(sub, " ", "-"), dur: tc.lease, start: alignedAfter(t0, w)}
				// A burst at a window's start, retried at its
				// Retry-After; two Takes at once (the second leases);
				// a lease given back once the Takes before it left
				// a sliding log, its units not.
				var burst []leaseOp
				for range tc.events + 1 {
					burst = append(burst, leaseOp{0, 1})
				}
				l, wu := tc.lease.Microseconds(), w.Microseconds()
				for _, ops := range [][]leaseOp{burst, burst[:1], burst[:2], {{0, 1}, {l / 2, 1}, {wu + l, 1}}} {
					r.check(ops)
				}
				rng := rand.New(rand.NewSource(2))
				seen := map[string]int{}
				for range 150 {
					// Costs of 1 and 2 mixed (a denial cached
					// for one cost answers that cost only), Takes
					// close together, or spread over windows.
					var ops []leaseOp
					pace := []int64{wu / 50, wu / 4, 2 * wu}[rng.Intn(3)]
					at := rng.Int63n(wu)
					for range 1 + rng.Intn(int(2*tc.events)+2) {
						if rng.Intn(4) > 0 {
							at += rng.Int63n(pace)
						}
						ops = append(ops, leaseOp{at, 1 + rng.Int63n(2)})
					}
					seen[r.check(ops)]++
				}
				if seen["retry"] < 10 || seen["more"] < 10 {
					t.Fatalf("checked %d denials and %d admissions: the histories miss a case", seen["retry"], seen["more"])
				}
			})
		}
	}
}
