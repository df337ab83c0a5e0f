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

import (
	"fmt"
	"time"
)

// GCRAParams returns the emission interval T and burst tolerance tau, in
// microseconds, gcra uses for tier t with burst (0 means t.Events). The
// Redis store passes these to the Lua twin.
func GCRAParams(t Tier, burst int64) (interval, tolerance int64, err error) {
	p, err := gcraParams(t, burst)
	return p.interval, p.tau, err
}

type gcraTier struct {
	interval int64 // T, µs per unit
	tau      int64 // T*burst, µs
	burst    int64
	window   int64 // µs
}

func gcraParams(t Tier, burst int64) (gcraTier, error) {
	if burst <= 0 {
		burst = t.Events
	}
	w := t.Window.Microseconds()
	if t.Events <= 0 || w <= 0 {
		return gcraTier{}, fmt.Errorf("events and window must be positive")
	}
	iv := bktCeilDiv(w, t.Events)
	if iv > bktMaxParam/burst {
		return gcraTier{}, fmt.Errorf("burst %d with %d events per %s spans more than 2^50µs (35 years); lower the burst or the window", burst, t.Events, t.Window)
	}
	return gcraTier{interval: iv, tau: iv * burst, burst: burst, window: w}, nil
}

type gcra struct {
	cfg   Config
	tiers []gcraTier
}

func newGCRA(cfg Config) (Limiter, error) {
	ps := make([]gcraTier, len(cfg.Tiers))
	for i, t := range cfg.Tiers {
		p, err := gcraParams(t, cfg.Burst)
		if err != nil {
			return nil, fmt.Errorf("gcra: limit %d: %v", i+1, err)
		}
		ps[i] = p
	}
	return &gcra{cfg: bktCloneConfig(cfg), tiers: ps}, nil
}

func (l *gcra) Name() string   { return GCRA }
func (l *gcra) Config() Config { return l.cfg }

func (l *gcra) NewState() State {
	return &gcraState{l: l, tat: make([]int64, len(l.tiers))}
}

type gcraState struct {
	l    *gcra
	last int64   // latest instant seen, µs since the epoch
	tat  []int64 // theoretical arrival time per tier, µs since the epoch
}

// advance clamps now to the latest instant seen, raises every TAT to it and
// returns it in µs.
func (s *gcraState) advance(now time.Time) int64 {
	t := now.UnixMicro()
	if t < s.last {
		t = s.last
	}
	s.last = t
	for i, v := range s.tat {
		if v < t {
			s.tat[i] = t
		}
	}
	return t
}

func (s *gcraState) Take(now time.Time, cost int64) Decision {
	if cost < 0 {
		cost = 0
	}
	t := s.advance(now)
	tiers := s.l.tiers
	allowed := true
	for i := range tiers {
		p := &tiers[i]
		if cost > p.burst || t < s.tat[i]+p.interval*cost-p.tau {
			allowed = false
			break
		}
	}
	if allowed || s.l.cfg.CountRejected {
		for i := range tiers {
			p := &tiers[i]
			c := cost
			if c > 2*p.burst {
				c = 2 * p.burst // the clamp below gives the same TAT
			}
			nt := s.tat[i] + p.interval*c
			if limit := t + 2*p.tau; !allowed && nt > limit {
				nt = limit
			}
			s.tat[i] = nt
		}
	}
	best := bktPick{tier: -1}
	for i := range tiers {
		p := &tiers[i]
		ahead := s.tat[i] - t // >= 0
		v := bktPick{tier: i, resetAfter: ahead}
		if ahead < p.tau {
			v.remaining = (p.tau - ahead) / p.interval
		}
		if allowed {
			if bktBetterAllowed(v, best) {
				best = v
			}
			continue
		}
		if cost > p.burst {
			v.impossible, v.wait = true, p.window
		} else if w := ahead + p.interval*cost - p.tau; w > 0 {
			v.wait = w
		}
		if bktBetterDenied(v, best) {
			best = v
		}
	}
	return bktDecision(allowed, best, tiers[best.tier].burst)
}

func (s *gcraState) Undo(now time.Time, cost int64, d Decision) {
	if !d.Allowed || cost <= 0 {
		return
	}
	t := s.advance(now)
	for i := range s.l.tiers {
		p := &s.l.tiers[i]
		if cost > p.burst {
			continue
		}
		if v := s.tat[i] - p.interval*cost; v > t {
			s.tat[i] = v
		} else {
			s.tat[i] = t
		}
	}
}

func (s *gcraState) Idle(now time.Time) bool {
	t := now.UnixMicro()
	if t < s.last {
		t = s.last
	}
	for _, v := range s.tat {
		if v > t {
			return false
		}
	}
	return true
}
