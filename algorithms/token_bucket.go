package algorithms

// token_bucket: a bucket of tokens per tier that refills continuously at
// rate Events/Window up to a capacity B (Config.Burst, or the tier's Events
// when Burst is 0). There is no refill thread: a Take first refills from the
// last instant the state has seen.
//
// Exact integer model (the Lua twin must use the same arithmetic; every
// value stays below 2^53 so doubles are exact):
//
//	per tier (computed once in Go, see BucketParams; pass them to Lua):
//	  g     = gcd(Events, Wµs)
//	  rate  = Events/g          sub-units gained per microsecond
//	  scale = Wµs/g             sub-units per token
//	  if burst*scale > 2^50:    -- only for odd, huge limits
//	    M = floor(2^50/burst); f = ceil(scale/M)
//	    rate = floor(rate/f); scale = ceil(scale/f)   (never faster than asked;
//	    New returns an error if rate < 1024 or M < 1024: off by > 0.1%)
//	  cap   = burst*scale       (<= 2^50)
//	state: last (µs), level[i] in sub-units; fresh: level = cap, last = 0
//
//	t  = max(now, last); dt = t - last; last = t
//	refill: deficit = cap - level
//	        level = (dt >= ceil(deficit/rate)) ? cap : level + dt*rate
//	c  = cost*scale
//	allowed iff cost <= burst and level >= c, in every tier
//	allowed: level -= c in every tier
//	denied with CountRejected: level = max(level - c, -cap) in every tier
//	        (with min(cost, 2*burst) for cost: the same level, no overflow)
//	remaining  = max(0, floor(level/scale))
//	resetAfter = ceil((cap - level)/rate)                  µs until full
//	moreAfter  = remaining < burst
//	             ? ceil(((remaining+1)*scale - level)/rate) : 0
//	             µs until one more token than remaining
//	retryAfter = max(0, ceil((c - level)/rate))            µs, after the update
//	             (Window when cost > burst: it can never pass)
//	undo (admitted only): refill, level = min(cap, level + c)
//	(a negative cost counts as 0)
//	idle: every tier full after refill
//
// Decision: denied => the tier with the longest retryAfter (one whose cost
// exceeds its burst first, the longest Window among those); allowed => the
// tier with the fewest remaining; ties go to the lowest index. RetryAfter is
// the time until every tier admits: with CountRejected the longest wait may
// be in a tier that admitted but that the rejected request drained, and
// then Tier names that tier.

import "fmt"

// TokenBucket is the name of token_bucket.
const TokenBucket = "token_bucket"

func init() {
	register(Algorithm{Name: TokenBucket, New: newTokenBucket, Burst: true, rank: 3})
}

// newTokenBucket is a bucket (bucket.go) whose level counts the tokens
// missing: the water of a leaky bucket, which a refill drains. The
// decisions are the model's above with level = cap - tokens.
func newTokenBucket(cfg Config) (Limiter, error) {
	return newBucket(TokenBucket, cfg, bktParams, false)
}

// bktMaxParam bounds a bucket's capacity in sub-units and gcra's tolerance
// in µs: 2^50, so that every intermediate value (up to 4x that, plus a
// timestamp for gcra) stays below 2^53, exact in a double (Lua).
const bktMaxParam = int64(1) << 50

// BucketParams returns the integer constants token_bucket and leaky_bucket
// use for tier t with burst (0 means t.Events): the bucket gains (token) or
// loses (leaky) rate sub-units per microsecond, one unit is scale
// sub-units, and the bucket holds capacity = burst*scale sub-units. The
// constants are exact (rate/scale = Events/Window in µs) unless capacity
// would exceed 2^50, in which case the rate is rounded down by at most
// about 0.2% (never faster than configured). The Redis store passes
// these to the Lua twin.
func BucketParams(t Tier, burst int64) (rate, scale, capacity int64, err error) {
	p, err := bktParams(t, burst)
	return p.rate, p.scale, p.cap, err
}

func bktParams(t Tier, burst int64) (bktTier, error) {
	if burst <= 0 {
		burst = t.Events
	}
	if burst > bktMaxParam {
		return bktTier{}, fmt.Errorf("capacity %d is too large (at most 2^50)", burst)
	}
	w := t.Window.Microseconds()
	if t.Events <= 0 || w <= 0 {
		return bktTier{}, fmt.Errorf("events and window must be positive")
	}
	g := bktGCD(t.Events, w)
	rate, scale := t.Events/g, w/g
	if maxScale := bktMaxParam / burst; scale > maxScale {
		// Too fine to be exact: divide both by f, the least that fits,
		// rounding the rate down and the scale up.
		f := bktCeilDiv(scale, maxScale)
		rate, scale = rate/f, bktCeilDiv(scale, f)
		if rate < 1024 || maxScale < 1024 {
			return bktTier{}, fmt.Errorf("burst %d with %d events per %s needs numbers beyond 2^50; lower the burst or the window", burst, t.Events, t.Window)
		}
	}
	return bktTier{rate: rate, scale: scale, cap: burst * scale, burst: burst, window: w}, nil
}
