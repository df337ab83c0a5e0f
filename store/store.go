// Package store holds where rate-limit state lives: the Store interface the
// handler depends on, and the in-memory store.
package store

import (
	"context"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// Store keeps the state of one zone's keys under one algorithms.Limiter.
// Implementations are safe for concurrent use.
type Store interface {
	// Take decides whether key may consume cost units at now, across all
	// tiers of the zone at once. A zero now means the store's own clock
	// (time.Now for memory, Redis TIME for Redis); tests pass instants.
	Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error)

	// Undo gives back what an admitted Take of cost, which returned d,
	// consumed: when a later zone denies the request, and when a
	// concurrency request ends.
	Undo(ctx context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error
}

// Relimitable is a Store whose keys can be decided under other limits of
// its algorithm: a zone's limits after a config reload that kept the store,
// or limits that vary per request.
type Relimitable interface {
	// Under returns a Store deciding under l, a Limiter of the store's
	// algorithm, over the same keys: what a key has used under one
	// Limiter counts under the other (see algorithms.Relimiter).
	Under(l algorithms.Limiter) (Store, error)
}

// Unsettled is the error of a Take that failed after it may have reached
// the store: a Redis that answered later than the caller waited may still
// apply it. A concurrency lease taken so would hold its slot, known to
// nobody, until its window ends; Forget gives it back, or keeps the Take
// from taking anything if it has not run yet. Calling Forget again, after
// an error or not, is harmless.
type Unsettled struct {
	Err    error
	Forget func(ctx context.Context) error
}

func (u *Unsettled) Error() string { return u.Err.Error() }

func (u *Unsettled) Unwrap() error { return u.Err }
