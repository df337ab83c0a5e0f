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
//	retryAfter = max(0, ceil((level + c - cap)/rate))      µs, after the update
//	             (Window when cost > burst: it can never pass)
//	undo (admitted only): leak, level = max(0, level - c)
//	idle: every tier empty after the leak
//	(a negative cost counts as 0)
//
// Decision: as token_bucket (denied => longest retryAfter; allowed =>
// fewest remaining; ties to the lowest index), plus Delay when allowed.

import (
	"fmt"
	"time"
)

type leakyBucket struct {
	cfg   Config
	tiers []bktTier
}

func newLeakyBucket(cfg Config) (Limiter, error) {
	ps, err := bktTiers(cfg)
	if err != nil {
		return nil, fmt.Errorf("leaky_bucket: %v", err)
	}
	return &leakyBucket{cfg: bktCloneConfig(cfg), tiers: ps}, nil
}

func (l *leakyBucket) Name() string   { return LeakyBucket }
func (l *leakyBucket) Config() Config { return l.cfg }

func (l *leakyBucket) NewState() State {
	return &leakyBucketState{l: l, level: make([]int64, len(l.tiers))}
}

type leakyBucketState struct {
	l     *leakyBucket
	last  int64   // latest instant seen, µs since the epoch
	level []int64 // water per tier, in sub-units
}

// lbLeak is level after dt µs of leaking.
func lbLeak(level, dt int64, p *bktTier) int64 {
	if level <= 0 {
		return 0
	}
	if dt >= bktCeilDiv(level, p.rate) {
		return 0
	}
	return level - dt*p.rate
}

// advance clamps now to the latest instant seen, leaks every tier to it and
// returns it in µs.
func (s *leakyBucketState) advance(now time.Time) int64 {
	t := now.UnixMicro()
	if t <= s.last {
		return s.last
	}
	dt := t - s.last
	s.last = t
	for i := range s.level {
		s.level[i] = lbLeak(s.level[i], dt, &s.l.tiers[i])
	}
	return t
}

func (s *leakyBucketState) Take(now time.Time, cost int64) Decision {
	if cost < 0 {
		cost = 0
	}
	s.advance(now)
	tiers := s.l.tiers
	allowed := true
	for i := range tiers {
		if cost > tiers[i].burst || s.level[i]+cost*tiers[i].scale > tiers[i].cap {
			allowed = false
			break
		}
	}
	var delay int64
	if allowed || s.l.cfg.CountRejected {
		for i := range tiers {
			p := &tiers[i]
			if allowed {
				if w := bktCeilDiv(s.level[i], p.rate); w > delay {
					delay = w
				}
			}
			c := cost
			if c > 2*p.burst {
				c = 2 * p.burst // the clamp below gives the same level
			}
			lv := s.level[i] + c*p.scale
			if lv > 2*p.cap {
				lv = 2 * p.cap
			}
			s.level[i] = lv
		}
	}
	best := bktPick{tier: -1}
	for i := range tiers {
		p := &tiers[i]
		lv := s.level[i]
		v := bktPick{tier: i, resetAfter: bktCeilDiv(lv, p.rate)}
		if lv < p.cap {
			v.remaining = (p.cap - lv) / p.scale
		}
		if allowed {
			if bktBetterAllowed(v, best) {
				best = v
			}
			continue
		}
		if cost > p.burst {
			v.impossible, v.wait = true, p.window
		} else if over := lv + cost*p.scale - p.cap; over > 0 {
			v.wait = bktCeilDiv(over, p.rate)
		}
		if bktBetterDenied(v, best) {
			best = v
		}
	}
	d := bktDecision(allowed, best, tiers[best.tier].burst)
	d.Delay = bktDur(delay)
	return d
}

func (s *leakyBucketState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	s.advance(now)
	for i := range s.l.tiers {
		p := &s.l.tiers[i]
		if cost > p.burst {
			continue
		}
		if lv := s.level[i] - cost*p.scale; lv > 0 {
			s.level[i] = lv
		} else {
			s.level[i] = 0
		}
	}
}

func (s *leakyBucketState) Idle(now time.Time) bool {
	dt := now.UnixMicro() - s.last
	if dt < 0 {
		dt = 0
	}
	for i := range s.level {
		if lbLeak(s.level[i], dt, &s.l.tiers[i]) != 0 {
			return false
		}
	}
	return true
}
