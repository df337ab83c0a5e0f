package algorithms

// What token_bucket, leaky_bucket and gcra share: each is a bucket per tier
// whose level drains at rate sub-units per µs, into which a request pours
// cost*scale sub-units, admitted iff the level stays within cap:
//
//   - leaky_bucket: the level is the water;
//   - token_bucket: the level is cap minus the tokens (the tokens missing),
//     so a refill is a leak and a Take pours what it spends;
//   - gcra: the level is TAT - t, the µs the TAT is ahead of now, draining
//     1 per µs; a unit is the emission interval T and cap is tau.
//
// With these levels the three models of the algorithms' files are one:
//
//	t  = max(now, last); dt = t - last; last = t
//	leak:  level = (dt*rate >= level) ? 0 : level - dt*rate
//	c  = cost*scale
//	allowed iff cost <= burst and level + c <= cap, in every tier
//	allowed: (leaky_bucket) delay = max over tiers of ceil(level/rate)
//	         level += c in every tier
//	denied with CountRejected: level = min(level + c, 2*cap) in every tier
//	         (with min(cost, 2*burst) for cost: the same level, no overflow)
//	remaining  = max(0, floor((cap - level)/scale))
//	resetAfter = ceil(level/rate)
//	moreAfter  = remaining < burst ? ceil((level - (cap - (remaining+1)*scale))/rate) : 0
//	             (the wait of remaining+1 units: until the level is low
//	             enough for one more)
//	retryAfter = max(0, ceil((level + c - cap)/rate))   after the update
//	             (Window when cost > burst: it can never pass)
//	undo (admitted only): leak, level = max(0, level - c)
//	idle: every tier empty after the leak

import (
	"fmt"
	"math/bits"
	"time"
)

// bktTier holds the integer constants of one tier of a bucket.
type bktTier struct {
	rate   int64 // sub-units drained per µs
	scale  int64 // sub-units per unit
	cap    int64 // burst*scale
	burst  int64 // capacity in units
	window int64 // µs
}

// drained is how many µs a level of x sub-units takes to drain: ceil(x/rate).
func (p *bktTier) drained(x int64) int64 {
	if p.rate == 1 { // gcra: no division on its hot path
		return x
	}
	return bktCeilDiv(x, p.rate)
}

// leak is level after dt >= 0 µs of draining.
func (p *bktTier) leak(level, dt int64) int64 {
	if level <= 0 {
		return 0
	}
	// dt >= ceil(level/rate) iff dt*rate >= level; the product may not
	// fit in 64 bits.
	hi, lo := bits.Mul64(uint64(dt), uint64(p.rate))
	if hi != 0 || lo >= uint64(level) {
		return 0
	}
	return level - int64(lo)
}

type bucket struct {
	limiter
	tiers []bktTier
	delay bool // an admitted Decision carries the Delay (leaky_bucket)
}

// newBucket returns the bucket algorithm name with the constants params
// gives for each tier.
func newBucket(name string, cfg Config, params func(Tier, int64) (bktTier, error), delay bool) (Limiter, error) {
	ps := make([]bktTier, len(cfg.Tiers))
	for i, t := range cfg.Tiers {
		p, err := params(t, cfg.Burst)
		if err != nil {
			field := "tiers"
			if cfg.Burst > 0 {
				field = "burst"
			}
			return nil, &ConfigError{Field: field, Tier: i, Err: fmt.Errorf("%s: limit %d: %v", name, i+1, err)}
		}
		ps[i] = p
	}
	return &bucket{limiter: newLimiter(name, cfg), tiers: ps, delay: delay}, nil
}

func (l *bucket) NewState() State {
	s := &bucketState{l: l}
	s.level = inOne(len(l.tiers), &s.one)
	return s
}

type bucketState struct {
	l     *bucket
	last  int64   // latest instant seen, µs since the epoch
	level []int64 // per tier, in sub-units (0: empty)
	one   [1]int64
}

// advance clamps now to the latest instant seen and drains every tier to
// it.
func (s *bucketState) advance(now time.Time) {
	t := now.UnixMicro()
	if t <= s.last {
		return
	}
	dt := t - s.last
	s.last = t
	for i := range s.level {
		s.level[i] = s.l.tiers[i].leak(s.level[i], dt)
	}
}

func (s *bucketState) Take(now time.Time, cost int64) (d Decision) {
	cost = max(cost, 0)
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
	if allowed && s.l.delay {
		for i := range tiers {
			delay = max(delay, tiers[i].drained(s.level[i]))
		}
	}
	if allowed || s.l.cfg.CountRejected {
		for i := range tiers {
			p := &tiers[i]
			c := min(cost, 2*p.burst) // the clamp below gives the same level
			s.level[i] = min(s.level[i]+c*p.scale, 2*p.cap)
		}
	}
	// The tier the Decision describes: when allowed the one with the
	// fewest remaining, when denied the one with the longest wait (one
	// whose burst the cost exceeds first); ties go to the lowest index.
	// The pick is kept in scalars and only its reset and MoreAfter are
	// computed: a struct per tier, copied to compare and to pick, cost
	// more than the arithmetic.
	best, rem, wait, impossible := -1, int64(0), int64(0), false
	more := int64(-1) // the best's MoreAfter, once a tie needed it
	for i := range tiers {
		p := &tiers[i]
		lv := s.level[i]
		var r int64
		if lv < p.cap {
			r = (p.cap - lv) / p.scale
		}
		if allowed {
			switch {
			case best < 0 || r < rem:
				best, rem, more = i, r, -1
			case r == rem:
				// A tie goes to the tier that refuses one more unit
				// longest: the other's MoreAfter would be early.
				if more < 0 {
					more = s.moreOf(best, rem)
				}
				if m := s.moreOf(i, r); m > more {
					best, more = i, m
				}
			}
			continue
		}
		var w int64
		imp := cost > p.burst
		if imp {
			w = p.window
		} else if over := lv + cost*p.scale - p.cap; over > 0 {
			w = p.drained(over)
		}
		if best < 0 || imp != impossible && imp || imp == impossible && w > wait {
			best, rem, wait, impossible = i, r, w, imp
		}
	}
	p := &tiers[best]
	lv := s.level[best]
	if more < 0 { // moreOf, on what is at hand
		more = 0
		if rem < p.burst {
			more = p.drained(lv - (p.cap - (rem+1)*p.scale))
		}
	}
	// Field by field into the named result: a Decision built in one value
	// and then returned is copied through memory with wide moves that
	// stall on the narrow stores that built it.
	d.Allowed = allowed
	d.Tier = best
	d.Limit = p.burst
	d.Remaining = rem
	d.ResetAfter = Micros(p.drained(lv))
	d.MoreAfter = Micros(more)
	if !allowed {
		d.RetryAfter = max(Micros(wait), time.Microsecond)
	}
	d.Delay = Micros(delay)
	return d
}

// moreOf is tier i's MoreAfter (µs) with rem remaining: the wait of rem+1
// units, until its level is low enough for one more; 0 when it is whole.
func (s *bucketState) moreOf(i int, rem int64) int64 {
	p := &s.l.tiers[i]
	if rem >= p.burst {
		return 0
	}
	return p.drained(s.level[i] - (p.cap - (rem+1)*p.scale))
}

// Relimit drains every tier to now under the old constants, then converts
// its level to the new ones (bktConvert); an added tier starts empty.
func (s *bucketState) Relimit(now time.Time, l Limiter) {
	nl, ok := l.(*bucket)
	if !ok || nl == s.l || nl.name != s.l.name {
		return
	}
	s.advance(now)
	level := s.level[:min(len(s.level), len(nl.tiers))]
	for i := range level {
		level[i] = bktConvert(level[i], &s.l.tiers[i], &nl.tiers[i])
	}
	for len(level) < len(nl.tiers) {
		level = append(level, 0)
	}
	s.level, s.l = level, nl
}

// bktExact bounds the products the Lua twin computes exactly: 2^53.
const bktExact = int64(1) << 53

// bktConvert returns a level of o's sub-units in n's: unchanged when the
// unit is, else level*n.scale/o.scale rounded up, computed exactly when
// the two scales reduced by their gcd have a product below 2^53, else in
// whole units rounded up; at most n's capacity when the constants differ.
// Both twins compute it the same way (bucket_convert in lib.lua).
func bktConvert(level int64, o, n *bktTier) int64 {
	if o.scale == n.scale && o.cap == n.cap {
		return level
	}
	if o.scale != n.scale {
		g := bktGCD(o.scale, n.scale)
		a, b := n.scale/g, o.scale/g
		if a <= (bktExact-1)/b { // a*b < 2^53: r*a below is exact in a double
			q, r := level/b, level%b
			if q > n.cap/a {
				return n.cap
			}
			level = q*a + bktCeilDiv(r*a, b)
		} else {
			level = min(bktCeilDiv(level, o.scale), n.burst) * n.scale
		}
	}
	return min(level, n.cap)
}

func (s *bucketState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	s.advance(now)
	for i := range s.l.tiers {
		if p := &s.l.tiers[i]; cost <= p.burst {
			s.level[i] = max(s.level[i]-cost*p.scale, 0)
		}
	}
}

func (s *bucketState) Idle(now time.Time) bool {
	dt := max(now.UnixMicro()-s.last, 0)
	for i := range s.level {
		if s.l.tiers[i].leak(s.level[i], dt) != 0 {
			return false
		}
	}
	return true
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
