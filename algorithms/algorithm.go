// Package algorithms holds the rate-limiting algorithms of caddy-ratelimit in
// pure Go.
//
// Every algorithm takes the current time as an argument and never reads the
// clock, so the same timeline can be replayed in tests and against the Redis
// twin of each algorithm (package redisstore). A Limiter binds an algorithm to a
// zone's tiers; its State holds what one key has consumed. A State is not safe
// for concurrent use: the store that owns it serializes calls.
//
// States compute in integer microseconds since the Unix epoch
// (now.UnixMicro()), the resolution of Redis TIME, so that the Lua twin of
// each algorithm reaches the same numbers with the same arithmetic.
//
// Time going backwards (a clock step, or two goroutines whose readings of the
// clock arrive out of order) is treated as no time having passed: each State
// clamps now to the latest instant it has seen.
package algorithms

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Tier is one limit of a zone: at most Events units per Window.
type Tier struct {
	Events int64
	Window time.Duration
}

// Config is what a Limiter needs to know about a zone.
type Config struct {
	// Tiers must all admit a request for it to be admitted. At least one.
	Tiers []Tier

	// Burst is the bucket capacity of token_bucket, leaky_bucket and gcra,
	// in units, for every tier. Zero means each tier's Events.
	Burst int64

	// CountRejected makes denied requests consume too (punitive limiting).
	CountRejected bool
}

// Equal reports whether c and o are the same configuration.
func (c Config) Equal(o Config) bool {
	return slices.Equal(c.Tiers, o.Tiers) && c.Burst == o.Burst && c.CountRejected == o.CountRejected
}

// Decision is the outcome of one Take: whether the request may proceed and
// every value a response header needs.
type Decision struct {
	// Allowed reports whether every tier admitted the request.
	Allowed bool

	// Tier is the index in Config.Tiers of the tier the other fields
	// describe: the tier that refused (the one with the longest RetryAfter
	// if several did), or when allowed the tier with the fewest remaining.
	Tier int

	// Limit is the Events of that tier (or its Burst for bucket algorithms).
	Limit int64

	// Remaining is how many units that tier would still admit right now,
	// after this decision. Never negative.
	Remaining int64

	// ResetAfter is how long until that tier is whole again (Remaining ==
	// Limit) if nothing more arrives.
	ResetAfter time.Duration

	// MoreAfter is how long until that tier admits more than Remaining
	// units if nothing more arrives: the wait of a request of Remaining+1
	// units, exact and never early (for concurrency, at most a second, as
	// RetryAfter). Zero when the tier is whole (Remaining == Limit). It is
	// the t of the IETF RateLimit header: the time within which a client
	// can use no more than Remaining. With sliding windows and buckets it is
	// usually much shorter than ResetAfter.
	MoreAfter time.Duration

	// RetryAfter, when denied, is how long until a request of the same cost
	// would be admitted if nothing else arrives. Zero when allowed. Never
	// shorter than the real wait. When the cost can never be admitted
	// (it exceeds a tier's capacity) it is that tier's Window.
	RetryAfter time.Duration

	// Delay, when allowed, is how long the request should be held before it
	// proceeds for the admitted traffic to leave at a constant rate. Only
	// leaky_bucket sets it; the handler honours it with on_limit wait.
	Delay time.Duration

	// Token identifies what this Take recorded (the concurrency lease), for
	// State.Undo. Zero when there is nothing to identify.
	Token uint64

	// Blocked reports a denial that leaves the key blocked (a zone's
	// block_for, an operator's block; see store.Blocker): the denial that
	// started the block, or a request refused during it without being
	// counted. RetryAfter is then at least the time left of the block.
	Blocked bool
}

// Limiter is an algorithm bound to one zone's Config.
type Limiter interface {
	// Name is the algorithm's name, one of Names for the built-ins.
	Name() string

	// Config returns the configuration the Limiter was built with.
	Config() Config

	// NewState returns the state of a key with no history.
	NewState() State
}

// State is what one key has consumed under a Limiter. It is not safe for
// concurrent use.
type State interface {
	// Take decides whether cost units may be consumed at now across all
	// tiers at once. An admitted request consumes cost in every tier; a
	// denied one consumes nothing unless Config.CountRejected.
	Take(now time.Time, cost int64) Decision

	// Undo gives back what an admitted Take of cost, which returned d,
	// consumed: when a later zone denies the request, and when a
	// concurrency request ends. Undoing never makes the state more generous
	// than it was before the Take.
	Undo(now time.Time, cost int64, d Decision)

	// Idle reports whether the state at now is the same as NewState's, so
	// the store may drop it, or give it to a new key (a Lease algorithm's
	// memory store does, for the key it evicts).
	Idle(now time.Time) bool
}

// Relimiter is a State that can go on under another Limiter of its
// algorithm, keeping what its key has used: a zone whose limits changed (a
// config reload) or a request with limits of its own. Every built-in State
// is one.
//
// Tiers are matched by index: the state of an added tier starts empty, a
// removed tier's state is dropped. What a kept tier has used is
// interpreted under its new events, window and burst:
//   - sliding_log, sliding_window, fixed_window: counts stay counts. A
//     window that changes length keeps the counts only while they fall in
//     the current window of the new length; sliding_log keeps its units'
//     timestamps, but only those of the old window (and, with
//     CountRejected, at most the old events), so a longer window or a
//     higher limit may count fewer than were sent.
//   - token_bucket, leaky_bucket, gcra: a bucket keeps its level in units
//     (gcra: its debt, TAT - now, in emission intervals), converted
//     exactly to the new unit when the product of the two units reduced by
//     their gcd is below 2^53, else rounded up to a whole unit; capped at
//     the new capacity.
//   - concurrency: the leases held stay, each until its own expiry.
type Relimiter interface {
	// Relimit makes the state decide under l from now on, converting what
	// it has used at now (buckets drain under the old limits up to now
	// first). A no-op when l is the Limiter it decides under already, or
	// one of another algorithm.
	Relimit(now time.Time, l Limiter)
}

// Bounds within which every algorithm's numbers stay exact in a double
// (below 2^53), as the Redis store's Lua twins compute them: counts (events,
// burst, cost) up to MaxCount, windows up to MaxWindow, instants until
// about the year 2112 (2^52µs). The Go twins compute in int64 and would
// take more; New refuses more, so that every store decides alike.
const (
	// MaxCount bounds events and burst (2^50, about 1.1e15).
	MaxCount = int64(1) << 50

	// MaxWindow bounds a window: 3650 days (about 10 years, below 2^49µs).
	MaxWindow = 3650 * 24 * time.Hour

	// MinWindow is the shortest window New takes.
	MinWindow = time.Millisecond
)

func (c Config) validate() error {
	if len(c.Tiers) == 0 {
		return &ConfigError{Field: "tiers", Tier: -1, Err: errors.New("no limit: at least one tier (events per window) is required")}
	}
	for i, t := range c.Tiers {
		switch {
		case t.Events <= 0:
			return &ConfigError{Field: "events", Tier: i, Err: fmt.Errorf("limit %d: events must be positive, got %d", i+1, t.Events)}
		case t.Events > MaxCount:
			return &ConfigError{Field: "events", Tier: i, Err: fmt.Errorf("limit %d: events must be at most %d, got %d", i+1, MaxCount, t.Events)}
		case t.Window < MinWindow:
			return &ConfigError{Field: "window", Tier: i, Err: fmt.Errorf("limit %d: window must be at least %s, got %s", i+1, MinWindow, t.Window)}
		case t.Window > MaxWindow:
			return &ConfigError{Field: "window", Tier: i, Err: fmt.Errorf("limit %d: window must be at most %dd (about 10 years), got %s", i+1, MaxWindow/(24*time.Hour), t.Window)}
		}
	}
	switch {
	case c.Burst < 0:
		return &ConfigError{Field: "burst", Tier: -1, Err: fmt.Errorf("burst must be positive, got %d", c.Burst)}
	case c.Burst > MaxCount:
		return &ConfigError{Field: "burst", Tier: -1, Err: fmt.Errorf("burst must be at most %d, got %d", MaxCount, c.Burst)}
	}
	return nil
}

// ConfigError is a Config that New refuses. Field names the part at fault:
// "tiers" (their number), "events", "window", "burst" or "count_rejected";
// Tier is the index of the tier at fault, or -1.
type ConfigError struct {
	Field string
	Tier  int
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Micros converts microseconds, the unit the algorithms (and their Lua
// twins) compute in, to a Duration: never negative, and saturating instead
// of overflowing.
func Micros(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}
