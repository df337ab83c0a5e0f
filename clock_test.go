package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// testClock is the synthetic clock of the tests: the clock of the stores,
// of sync_interval and of on_limit wait (see provisionOptions).
//
// A clock from newClock advances at each sleep, at once, and records it
// (Slept). One from newStepClock is for many requests waiting at once: a
// sleeper blocks until the test moves the clock to the end of its sleep (or
// its context ends). The test runs requests with start, waits with settle
// until each of them sleeps or has finished, and moves time on with next:
// what happens at each instant is then decided, and can be counted,
// without real time passing.
type testClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration

	step     bool       // sleepers wait for next
	changed  *sync.Cond // broadcast when sleepers or running change
	sleepers map[*sleeper]struct{}
	running  int // requests started and not finished
}

type sleeper struct {
	until time.Time
	ctx   context.Context
	wake  chan struct{}
}

func newClock() *testClock {
	c := &testClock{t: time.Unix(1_700_000_000, 0), sleepers: make(map[*sleeper]struct{})}
	c.changed = sync.NewCond(&c.mu)
	return c
}

func newStepClock() *testClock {
	c := newClock()
	c.step = true
	return c
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if !c.step {
		defer c.mu.Unlock()
		c.slept = append(c.slept, d)
		c.t = c.t.Add(d)
		return nil
	}
	if d <= 0 {
		c.mu.Unlock()
		return nil
	}
	s := &sleeper{until: c.t.Add(d), ctx: ctx, wake: make(chan struct{})}
	c.sleepers[s] = struct{}{}
	c.changed.Broadcast()
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.sleepers, s)
		c.changed.Broadcast()
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the clock on by d, without waking a sleeper.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Slept returns the sleeps so far (not with a step clock).
func (c *testClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// start runs f (a request) in a goroutine of its own, counted as running
// until it returns.
func (c *testClock) start(f func()) {
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.running--
			c.changed.Broadcast()
			c.mu.Unlock()
		}()
		f()
	}()
}

// settle waits until every running request sleeps (its context alive) and
// returns how many run.
func (c *testClock) settle() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		live := 0
		for s := range c.sleepers {
			if s.ctx.Err() == nil {
				live++
			}
		}
		if live == c.running {
			return c.running
		}
		c.changed.Wait()
	}
}

// next moves the clock to the earliest end of a sleep and wakes the
// sleepers whose sleep ends then; false when none sleeps.
func (c *testClock) next() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *sleeper
	for s := range c.sleepers {
		if s.ctx.Err() == nil && (first == nil || s.until.Before(first.until)) {
			first = s
		}
	}
	if first == nil {
		return false
	}
	c.t = first.until
	for s := range c.sleepers {
		if !s.until.After(c.t) {
			delete(c.sleepers, s)
			close(s.wake)
		}
	}
	return true
}

// drain moves time on until no request runs.
func (c *testClock) drain(t *testing.T) {
	t.Helper()
	for c.settle() > 0 {
		if !c.next() {
			t.Fatal("requests run, but none sleeps")
		}
	}
}

// poolScopes numbers the pool scopes of the handlers provisioned on a test
// clock.
var poolScopes atomic.Int64

// provisionOn provisions h in ctx on clock c, in a pool scope of its own:
// its zones share no state with another handler's, whose stores would run
// on another clock. With a nil c, Provision: the real clock, the shared
// pool.
func provisionOn(ctx caddy.Context, h *Handler, c *testClock) error {
	if c == nil {
		return h.Provision(ctx)
	}
	return h.provision(ctx, provisionOptions{
		now:       c.Now,
		sleep:     c.Sleep,
		poolScope: "test clock " + strconv.FormatInt(poolScopes.Add(1), 10),
	})
}
