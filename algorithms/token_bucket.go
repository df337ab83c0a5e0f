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

import (
	"fmt"
	"time"
)

// bktMaxParam bounds a bucket's capacity in sub-units and gcra's tolerance
// in µs: 2^50, so that every intermediate value (up to 4x that, plus a
// timestamp for gcra) stays below 2^53, exact in a double (Lua).
const bktMaxParam = int64(1) << 50

// bktTier holds the integer constants of one tier of a bucket algorithm
// (token_bucket, leaky_bucket).
type bktTier struct {
	rate   int64 // sub-units refilled (token) or leaked (leaky) per µs
	scale  int64 // sub-units per unit
	cap    int64 // burst*scale
	burst  int64 // capacity in units
	window int64 // µs
}

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

func bktTiers(cfg Config) ([]bktTier, error) {
	ps := make([]bktTier, len(cfg.Tiers))
	for i, t := range cfg.Tiers {
		p, err := bktParams(t, cfg.Burst)
		if err != nil {
			return nil, fmt.Errorf("limit %d: %v", i+1, err)
		}
		ps[i] = p
	}
	return ps, nil
}

// bktCloneConfig copies cfg so that the caller cannot change a Limiter's
// tiers afterwards.
func bktCloneConfig(cfg Config) Config {
	cfg.Tiers = append([]Tier(nil), cfg.Tiers...)
	return cfg
}

func bktGCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// bktCeilDiv is ceil(a/b) for a >= 0, b > 0.
func bktCeilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}

// bktDur converts microseconds to a Duration, saturating instead of
// overflowing, and never negative.
func bktDur(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	if us > int64(1<<63-1)/int64(time.Microsecond) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us) * time.Microsecond
}

// bktPick is the per-tier view a Decision is chosen from.
type bktPick struct {
	tier       int
	remaining  int64
	resetAfter int64 // µs
	wait       int64 // µs until the same cost passes this tier
	impossible bool  // cost exceeds this tier's capacity
}

// bktBetterDenied reports whether tier view a should describe a denial
// rather than b (b may be unset: tier < 0).
func bktBetterDenied(a, b bktPick) bool {
	if b.tier < 0 {
		return true
	}
	if a.impossible != b.impossible {
		return a.impossible
	}
	return a.wait > b.wait // ties: the lower index, seen first, stays
}

// bktBetterAllowed reports whether tier view a should describe an
// admission rather than b.
func bktBetterAllowed(a, b bktPick) bool {
	return b.tier < 0 || a.remaining < b.remaining
}

func bktDecision(allowed bool, p bktPick, limit int64) Decision {
	d := Decision{
		Allowed:    allowed,
		Tier:       p.tier,
		Limit:      limit,
		Remaining:  p.remaining,
		ResetAfter: bktDur(p.resetAfter),
	}
	if !allowed {
		d.RetryAfter = bktDur(p.wait)
		if d.RetryAfter <= 0 {
			d.RetryAfter = time.Microsecond
		}
	}
	return d
}

type tokenBucket struct {
	cfg   Config
	tiers []bktTier
}

func newTokenBucket(cfg Config) (Limiter, error) {
	ps, err := bktTiers(cfg)
	if err != nil {
		return nil, fmt.Errorf("token_bucket: %v", err)
	}
	return &tokenBucket{cfg: bktCloneConfig(cfg), tiers: ps}, nil
}

func (l *tokenBucket) Name() string   { return TokenBucket }
func (l *tokenBucket) Config() Config { return l.cfg }

func (l *tokenBucket) NewState() State {
	s := &tokenBucketState{l: l, level: make([]int64, len(l.tiers))}
	for i := range l.tiers {
		s.level[i] = l.tiers[i].cap
	}
	return s
}

type tokenBucketState struct {
	l     *tokenBucket
	last  int64   // latest instant seen, µs since the epoch
	level []int64 // tokens per tier, in sub-units
}

// tbFill is level after dt µs of refill.
func tbFill(level, dt int64, p *bktTier) int64 {
	deficit := p.cap - level
	if deficit <= 0 {
		return level
	}
	if dt >= bktCeilDiv(deficit, p.rate) {
		return p.cap
	}
	return level + dt*p.rate
}

// advance clamps now to the latest instant seen, refills every tier to it
// and returns it in µs.
func (s *tokenBucketState) advance(now time.Time) int64 {
	t := now.UnixMicro()
	if t <= s.last {
		return s.last
	}
	dt := t - s.last
	s.last = t
	for i := range s.level {
		s.level[i] = tbFill(s.level[i], dt, &s.l.tiers[i])
	}
	return t
}

func (s *tokenBucketState) Take(now time.Time, cost int64) Decision {
	if cost < 0 {
		cost = 0
	}
	s.advance(now)
	tiers := s.l.tiers
	allowed := true
	for i := range tiers {
		if cost > tiers[i].burst || s.level[i] < cost*tiers[i].scale {
			allowed = false
			break
		}
	}
	if allowed || s.l.cfg.CountRejected {
		for i := range tiers {
			p := &tiers[i]
			c := cost
			if c > 2*p.burst {
				c = 2 * p.burst // the clamp below gives the same level
			}
			lv := s.level[i] - c*p.scale
			if lv < -p.cap {
				lv = -p.cap
			}
			s.level[i] = lv
		}
	}
	best := bktPick{tier: -1}
	for i := range tiers {
		p := &tiers[i]
		lv := s.level[i]
		v := bktPick{tier: i, resetAfter: bktCeilDiv(p.cap-lv, p.rate)}
		if lv > 0 {
			v.remaining = lv / p.scale
		}
		if allowed {
			if bktBetterAllowed(v, best) {
				best = v
			}
			continue
		}
		if cost > p.burst {
			v.impossible, v.wait = true, p.window
		} else if need := cost*p.scale - lv; need > 0 {
			v.wait = bktCeilDiv(need, p.rate)
		}
		if bktBetterDenied(v, best) {
			best = v
		}
	}
	return bktDecision(allowed, best, tiers[best.tier].burst)
}

func (s *tokenBucketState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	s.advance(now)
	for i := range s.l.tiers {
		p := &s.l.tiers[i]
		if cost > p.burst {
			continue
		}
		if lv := s.level[i] + cost*p.scale; lv < p.cap {
			s.level[i] = lv
		} else {
			s.level[i] = p.cap
		}
	}
}

func (s *tokenBucketState) Idle(now time.Time) bool {
	dt := now.UnixMicro() - s.last
	if dt < 0 {
		dt = 0
	}
	for i := range s.level {
		if tbFill(s.level[i], dt, &s.l.tiers[i]) != s.l.tiers[i].cap {
			return false
		}
	}
	return true
}
