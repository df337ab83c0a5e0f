package algorithms

// leaky_bucket: per tier a bucket of water of level L that leaks at rate
// Events/Window, capacity B (Config.Burst, or the tier's Events when Burst
// is 0). A request pours cost units in; it is admitted iff the water fits.
// With on_limit wait the handler holds each admitted request for Delay, the
// time the water ahead of it takes to leak, so admitted requests leave at
// the constant rate (nginx limit_req without nodelay). With on_limit reject
// Delay is ignored and it admits like token_bucket.
//
// Exact integer model (the same constants as token_bucket, see
// BucketParams: rate sub-units leak per µs, one unit = scale sub-units,
// cap = burst*scale; every value stays below 2^53):
//
//	state: last (µs), level[i] in sub-units; fresh: level = 0, last = 0
//
//	t  = max(now, last); dt = t - last; last = t
//	leak:  level = (dt >= ceil(level/rate)) ? 0 : level - dt*rate
//	c  = cost*scale
//	allowed iff cost <= burst and level + c <= cap, in every tier
//	allowed: delay = max over tiers of ceil(level/rate)   (level before adding:
//	         the water ahead of this request; the slowest tier sets the pace)
//	         level += c in every tier
//	denied with CountRejected: level = min(level + c, 2*cap) in every tier
//	         (with min(cost, 2*burst) for cost: the same level, no overflow)
//	remaining  = max(0, floor((cap - level)/scale))
//	resetAfter = ceil(level/rate)                          µs until empty
//	moreAfter  = remaining < burst
//	             ? ceil((level - cap + (remaining+1)*scale)/rate) : 0
//	             µs until room for one more unit than remaining
//	retryAfter = max(0, ceil((level + c - cap)/rate))      µs, after the update
//	             (Window when cost > burst: it can never pass)
//	undo (admitted only): leak, level = max(0, level - c)
//	idle: every tier empty after the leak
//	(a negative cost counts as 0)
//
// Decision: as token_bucket (denied => longest retryAfter; allowed =>
// fewest remaining; ties to the lowest index), plus Delay when allowed.

// LeakyBucket is the name of leaky_bucket.
const LeakyBucket = "leaky_bucket"

func init() {
	register(Algorithm{Name: LeakyBucket, New: newLeakyBucket, Burst: true, Delay: true, rank: 4})
}

// newLeakyBucket is a bucket (bucket.go) whose level is the water.
func newLeakyBucket(cfg Config) (Limiter, error) {
	return newBucket(LeakyBucket, cfg, bktParams, true)
}
