package algorithms

// concurrency: at most Events units in flight per key. Exactly one tier;
// its Window is how long a lease lives at most, so a request that never
// ends (a crashed instance) frees its slot after the window. Burst and
// CountRejected do not apply (New returns an error).
//
// Model, in integer microseconds (the Lua twin must do the same):
//
//	state: last (µs), lastToken, leases = [(token, cost, expiry)] in
//	       arrival order (so ordered by expiry and by token), held = sum of
//	       the leases' costs
//
//	t = max(now, last); last = t
//	drop every lease with expiry <= t
//	allowed iff cost <= Events and held + cost <= Events
//	allowed: token = max(lastToken + 1, t); lastToken = token
//	         append (token, cost, t + Wµs); held += cost
//	         (cost 0 is admitted without a lease: token 0)
//	remaining  = Events - held                       after the update
//	resetAfter = expiry of the newest lease - t      (0 with no lease)
//	moreAfter  = min(1s, expiry of the oldest lease - t), at least 1µs
//	             (0 with no lease): when a unit is sure to come back, at
//	             most a second, as retryAfter
//	retryAfter (denied) = min(1s, e - t), at least 1µs, where e is the
//	             expiry of the oldest lease whose expiry frees enough slots
//	             for cost (requests usually end long before their lease
//	             expires, and we cannot know when, so a client is told to
//	             retry within a second); Window when cost > Events.
//	             Only the ccMaxScan (64) oldest leases are looked at (a
//	             denial costs O(1) whatever the cost): 1s when enough
//	             slots are not freed by them
//	undo: drop the lease whose token is d.Token (unknown or expired: no-op)
//	idle: no lease with expiry > t
//
// Tokens are never 0 and grow with time (at least the current µs), so a
// token from a state that was swept and recreated cannot release a lease
// of the new state. The Redis twin differs here only: its caller makes the
// token (unique across instances), so that a take whose answer was lost
// can be given back by it (see redisstore's concurrency.lua).

import (
	"slices"
	"time"
)

// Concurrency is the name of concurrency.
const Concurrency = "concurrency"

func init() {
	register(Algorithm{
		Name: Concurrency, New: newConcurrency, Lease: true, rank: 6,
		OneTier:         "requests in flight, lease lifetime",
		NoCountRejected: "a denied request holds no lease",
	})
}

type concurrency struct {
	limiter
	events int64
	window int64 // µs
}

// newConcurrency takes one tier, no burst and no CountRejected (New checks
// them against the registry entry).
func newConcurrency(cfg Config) (Limiter, error) {
	t := cfg.Tiers[0]
	return &concurrency{limiter: newLimiter(Concurrency, cfg), events: t.Events, window: t.Window.Microseconds()}, nil
}

// ccMaxWait bounds retryAfter and moreAfter (µs): a request usually ends
// long before its lease expires, and when is not known.
const ccMaxWait = int64(time.Second / time.Microsecond)

// ccMaxScan bounds the leases a denial looks at for its retryAfter.
const ccMaxScan = 64

// ccMaxPrealloc bounds the leases a fresh state preallocates room for:
// most keys hold few requests in flight, and append grows the rest.
const ccMaxPrealloc = 4

func (l *concurrency) NewState() State {
	n := l.events
	if n > ccMaxPrealloc {
		n = ccMaxPrealloc
	}
	s := &concurrencyState{l: l}
	s.leases = s.pre[:0:n] // allocated with the state (see inOne)
	return s
}

type ccLease struct {
	token  uint64
	cost   int64
	expiry int64 // µs since the epoch
}

type concurrencyState struct {
	l         *concurrency
	last      int64 // latest instant seen, µs since the epoch
	lastToken uint64
	held      int64
	leases    []ccLease // ordered by expiry (and token)
	// until is the last lease's expiry, while there is one: Idle reads it
	// without touching the slice, which a store evicting the key is
	// unlikely to have in cache (a flood of new keys asks every key it
	// evicts).
	until int64

	pre [ccMaxPrealloc]ccLease // leases' first array
}

// advance clamps now to the latest instant seen, drops the leases expired at
// it and returns it in µs.
func (s *concurrencyState) advance(now time.Time) int64 {
	t := now.UnixMicro()
	if t < s.last {
		t = s.last
	}
	s.last = t
	k := 0
	for k < len(s.leases) && s.leases[k].expiry <= t {
		s.held -= s.leases[k].cost
		k++
	}
	if k == len(s.leases) {
		s.leases = s.leases[:0] // all expired: nothing to move (no memmove call)
	} else if k > 0 {
		s.leases = s.leases[:copy(s.leases, s.leases[k:])]
	}
	return t
}

func (s *concurrencyState) Take(now time.Time, cost int64) (d Decision) {
	if cost < 0 {
		cost = 0
	}
	t := s.advance(now)
	l := s.l
	d.Limit = l.events // field by field into the named result: no copy
	if cost <= l.events && s.held+cost <= l.events {
		d.Allowed = true
		if cost > 0 {
			tok := s.lastToken + 1
			if ut := uint64(t); ut > tok {
				tok = ut
			}
			s.lastToken = tok
			ls := ccLease{token: tok, cost: cost, expiry: t + l.window}
			if n := len(s.leases); n == 0 || s.leases[n-1].expiry <= ls.expiry {
				s.leases = append(s.leases, ls) // expires last, as usual
				s.until = ls.expiry
			} else {
				s.insert(ls) // the window was shortened
			}
			s.held += cost
			d.Token = tok
		}
	} else if cost > l.events {
		d.RetryAfter = Micros(l.window)
	} else {
		// The oldest lease whose expiry frees enough slots.
		free := l.events - s.held
		wait := int64(ccMaxWait)
		for k, ls := range s.leases {
			if k == ccMaxScan {
				break
			}
			free += ls.cost
			if free >= cost {
				if w := ls.expiry - t; w < wait {
					wait = w
				}
				break
			}
		}
		if wait < 1 {
			wait = 1
		}
		d.RetryAfter = Micros(wait)
	}
	d.Remaining = max(l.events-s.held, 0) // held may exceed a lowered limit
	if len(s.leases) > 0 {
		d.ResetAfter = Micros(s.until - t)
		d.MoreAfter = Micros(max(min(s.leases[0].expiry-t, ccMaxWait), 1))
	}
	return d
}

// Relimit keeps the leases held, each until its own expiry: a lower limit
// admits no more until enough of them end.
func (s *concurrencyState) Relimit(_ time.Time, l Limiter) {
	if nl, ok := l.(*concurrency); ok && nl != s.l {
		s.l = nl // written only on a change: every Take under other limits calls Relimit
	}
}

// insert adds ls in expiry order: after every lease that expires no
// later. Take appends a lease that expires last (the usual case) itself;
// one of a shortened window may expire before those already held.
func (s *concurrencyState) insert(ls ccLease) {
	i := len(s.leases)
	for i > 0 && s.leases[i-1].expiry > ls.expiry {
		i--
	}
	s.leases = slices.Insert(s.leases, i, ls)
}

func (s *concurrencyState) Undo(now time.Time, cost int64, d Decision) {
	if d.Token == 0 {
		return
	}
	s.advance(now)
	// Tokens grow along the slice (but after the window was shortened):
	// binary search, then a scan.
	lo, hi := 0, len(s.leases)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.leases[m].token < d.Token {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.leases) || s.leases[lo].token != d.Token {
		lo = slices.IndexFunc(s.leases, func(ls ccLease) bool { return ls.token == d.Token })
	}
	if lo >= 0 {
		s.held -= s.leases[lo].cost
		s.leases = append(s.leases[:lo], s.leases[lo+1:]...)
		if n := len(s.leases); n > 0 {
			s.until = s.leases[n-1].expiry
		}
	}
}

func (s *concurrencyState) Idle(now time.Time) bool {
	t := now.UnixMicro()
	if t < s.last {
		t = s.last
	}
	return len(s.leases) == 0 || s.until <= t
}
