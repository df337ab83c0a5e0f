package redisstore

// Deciding in the Redis store: Take and Undo, one script call each
// (through the Pipeliner, when the Store has one), and what a failed
// call may have left behind in Redis.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// Modes of a script call (ARGV[1]), boxed once.
var (
	modeTake   any = "0"
	modeUndo   any = "1"
	modeForget any = "3"
	noNow      any = ""
)

// args returns ARGV: the common arguments (see lib.lua), then the
// algorithm's constants. Integers are passed as int64 (go-redis writes them
// in decimal; small ones box without allocating).
func (s *Store) args(mode any, now time.Time, cost int64, extra string) []any {
	a := make([]any, 0, 5+len(s.static))
	ns := noNow
	if !now.IsZero() {
		ns = now.UnixMicro()
	}
	a = append(a, mode, ns, cost, s.cr, extra)
	return append(a, s.static...)
}

// Take decides whether key may consume cost units at now (Redis TIME when
// now is zero) with one EVALSHA.
func (s *Store) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	c := storeCall{s: s, key: key, now: now, cost: min(cost, s.maxCost)}
	switch {
	case s.script.member:
		c.n = s.counter.Add(1)
	case s.script.byToken:
		c.n = s.tokens + s.counter.Add(1)
	}
	var r reply
	s.call(ctx, &c, &r)
	if r.err != nil {
		err := fmt.Errorf("redis store: %s: %w", s.l.Name(), r.err)
		if s.script.byToken && c.cost > 0 && mayRunLater(r.err) {
			return algorithms.Decision{}, &store.Unsettled{Err: err, Forget: func(ctx context.Context) error {
				return s.forget(ctx, key, c.cost, c.n)
			}}
		}
		return algorithms.Decision{}, err
	}
	res := r.ints()
	if len(res) < 9 {
		return algorithms.Decision{}, fmt.Errorf("redis store: %s: script answered %d values, want 9", s.l.Name(), len(res))
	}
	d := decisionOf(res)
	if len(res) > 9 && res[9] == 1 {
		d.Blocked = true
		if d.Limit == 0 { // refused by the block, before the algorithm
			d.Limit = s.blockLimit
		}
	}
	return d, nil
}

// Undo gives back what an admitted Take of cost, which returned d, consumed
// (one EVALSHA; none when there is nothing to give back).
func (s *Store) Undo(ctx context.Context, key string, now time.Time, cost int64, d algorithms.Decision) error {
	if !d.Allowed {
		return nil
	}
	if s.script.byToken {
		if d.Token == 0 {
			return nil
		}
	} else if cost <= 0 {
		return nil
	}
	c := storeCall{s: s, key: key, undo: true, now: now, cost: min(cost, s.maxCost), n: d.Token}
	var r reply
	s.call(ctx, &c, &r)
	if err := r.err; err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis store: %s undo: %w", s.l.Name(), err)
	}
	return nil
}

// forget gives back the lease of token, taken by a Take of cost whose
// answer was lost, or, when that Take has not run yet, leaves a tombstone
// that keeps it from taking anything (see concurrency.lua).
func (s *Store) forget(ctx context.Context, key string, cost int64, token uint64) error {
	c := storeCall{s: s, key: key, undo: true, forget: true, cost: cost, n: token}
	var r reply
	s.call(ctx, &c, &r)
	if err := r.err; err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis store: %s forget: %w", s.l.Name(), err)
	}
	return nil
}

// call runs the script once for c, answering into r: in the Pipeliner's
// next pipeline, or on its own.
func (s *Store) call(ctx context.Context, c *storeCall, r *reply) {
	e := evalCall{script: s.script.run, take: *c}
	if s.pipe == nil {
		keys, args := e.keysArgs()
		*r = replyOf(evalOne(ctx, s.c, e.script, keys, args))
		return
	}
	s.pipe.runTo(ctx, &e, r)
}

// decisionOf reads the first nine values a script answers (see lib.lua):
// allowed, tier, limit, remaining, reset_after_us, retry_after_us,
// delay_us, token, more_after_us.
func decisionOf(res []int64) algorithms.Decision {
	return algorithms.Decision{
		Allowed:    res[0] == 1,
		Tier:       int(res[1]),
		Limit:      res[2],
		Remaining:  res[3],
		ResetAfter: algorithms.Micros(res[4]),
		MoreAfter:  algorithms.Micros(res[8]),
		RetryAfter: algorithms.Micros(res[5]),
		Delay:      algorithms.Micros(res[6]),
		Token:      uint64(res[7]),
	}
}

// mayRunLater reports whether a call that failed with err may still run in
// Redis: unless Redis answered it (an error reply), or it never left (a
// closed client, a connection that could not be made or taken, a call
// queued behind a batch that failed).
func mayRunLater(err error) bool {
	var re redis.Error
	var op *net.OpError
	var unsent unsentError
	switch {
	case errors.As(err, &re), errors.As(err, &unsent), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}
