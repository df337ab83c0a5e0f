package algorithms

// gcra: the Generic Cell Rate Algorithm, a token bucket kept as one number
// per tier, the theoretical arrival time (TAT). Capacity B = Config.Burst,
// or the tier's Events when Burst is 0.
//
// Integer model in microseconds (the Lua twin must use the same arithmetic;
// see GCRAParams):
//
//	per tier: T   = ceil(Wµs / Events), at least 1   emission interval
//	          tau = T * B                           burst tolerance
//	          (rounding T up never admits faster than configured; a limit
//	          whose window is not a multiple of its events is slightly
//	          slower, and one above 1 event per µs is held to 1 per µs.
//	          New returns an error when tau > 2^50, so that now + 4*tau
//	          stays below 2^53, exact in a double.)
//	state: last (µs), tat[i]; fresh: tat = 0, last = 0
//
//	t       = max(now, last); last = t
//	tat     = max(tat, t)                   in every tier
//	new_tat = tat + T*cost
//	allow_at = new_tat - tau
//	allowed iff cost <= B and t >= allow_at, in every tier
//	allowed: tat = new_tat in every tier
//	denied with CountRejected: tat = min(new_tat, t + 2*tau) in every tier
//	         (with min(cost, 2*B) for cost: the same TAT, no overflow)
//	remaining  = clamp(floor((tau - (tat - t)) / T), 0, B)   after the update
//	resetAfter = tat - t
//	moreAfter  = remaining < B ? tat - t - tau + T*(remaining+1) : 0
//	             (until remaining+1 units conform)
//	retryAfter = max(0, tat + T*cost - tau - t)             after the update;
//	             exact: admitted at t+retryAfter, not one µs earlier
//	             (Window when cost > B: it can never pass)
//	undo (admitted only): tat = max(tat - T*cost, t)
//	idle: tat <= t in every tier
//	(a negative cost counts as 0)
//
// Decision: denied => the tier with the longest retryAfter (one whose cost
// exceeds B first, the longest Window among those); allowed => the tier with
// the fewest remaining; ties go to the lowest index.

import "fmt"

// GCRA is the name of gcra.
const GCRA = "gcra"

func init() {
	register(Algorithm{Name: GCRA, New: newGCRA, Burst: true, rank: 5})
}

func newGCRA(cfg Config) (Limiter, error) {
	return newBucket(GCRA, cfg, gcraParams, false)
}

// GCRAParams returns the emission interval T and burst tolerance tau, in
// microseconds, gcra uses for tier t with burst (0 means t.Events). The
// Redis store passes these to the Lua twin.
func GCRAParams(t Tier, burst int64) (interval, tolerance int64, err error) {
	p, err := gcraParams(t, burst)
	return p.scale, p.cap, err
}

// gcraParams returns the constants of the bucket gcra is (bucket.go): its
// level is TAT - t, which drains 1 per µs, a unit is T µs, and cap is tau.
func gcraParams(t Tier, burst int64) (bktTier, error) {
	if burst <= 0 {
		burst = t.Events
	}
	w := t.Window.Microseconds()
	if t.Events <= 0 || w <= 0 {
		return bktTier{}, fmt.Errorf("events and window must be positive")
	}
	iv := bktCeilDiv(w, t.Events)
	if iv > bktMaxParam/burst {
		return bktTier{}, fmt.Errorf("burst %d with %d events per %s spans more than 2^50µs (35 years); lower the burst or the window", burst, t.Events, t.Window)
	}
	return bktTier{rate: 1, scale: iv, cap: iv * burst, burst: burst, window: w}, nil
}
