// Package breaker is a circuit breaker for a remote store such as Redis: when
// the store fails again and again, it stops callers from paying a timeout on
// every request, probes the store in the background, and lets calls through
// again as soon as the store answers.
//
// # Model
//
// A Breaker is Closed or Open.
//
// Closed is the healthy state: Allow reports true, the caller calls the store
// and reports the outcome with Record. Record counts consecutive failures; a
// success resets the count. When Options.Failures consecutive failures have
// been recorded (and, if Options.Window is set, the last Failures of them fell
// within Window), the breaker trips to Open.
//
// Open is the failing state: Allow reports false and the caller must not call
// the store; it decides at once without it (caddy-ratelimit applies on_error:
// let the request through, answer 503, or use the memory store). Outcomes
// recorded while Open (calls that were already under way when the breaker
// tripped) are ignored. A single background goroutine, started when the
// breaker trips, calls Options.Probe every Options.ProbeInterval until a probe
// succeeds; the breaker then closes, the failure count starts from zero and
// the goroutine exits. No goroutine runs while the breaker is Closed.
//
// There is no half-open state. In the classic design a half-open breaker lets
// a few real requests through as trial calls, and those requests pay the
// timeout when the store is still down. Here the background probe is the
// trial: no request ever waits on a store known to be failing, and when the
// probe succeeds the breaker closes outright. If the store fails again, the
// breaker trips again after Failures more failures.
//
// A failure that several calls see at once (one broken connection fails
// every call in flight on it) counts once when their errors wrap one
// *Shared: the calls of one batch are not that many failures in a row.
//
// # Time
//
// Like golang.org/x/time/rate, the state machine takes time as an argument:
// RecordAt(now, err) records an outcome at the instant now, so tests can run
// it on synthetic instants. Record reads the clock (Options.Now, time.Now by
// default), and only on a failure: a success never reads the clock. Time only
// matters to Window; the prober runs on real timers.
//
// # Cost
//
// While Closed, Allow is one atomic load and a successful Record is one
// atomic load (a store and a lock only when it resets a failure count); they
// never allocate. A failure takes a mutex: failures are rare when the store is
// healthy and each one has already cost the caller a round trip or a timeout.
//
// # State changes
//
// Options.OnStateChange is called exactly once per transition, never per
// request, in the order the transitions happen: once Closed to Open when the
// breaker trips, and once Open to Closed when a probe succeeds. It is meant
// for a log line and a metric gauge; Err tells why the breaker is open.
//
// The breaker is only as truthful as its probe: a probe that succeeds while
// the calls it stands for still fail closes the breaker for the next calls
// to trip it again, over and over. The probe should do what a call does (a
// Redis script that writes, not a PING, for a store whose calls are scripts
// that write).
package breaker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a Breaker.
type State int32

const (
	// Closed lets calls through: the store is believed healthy.
	Closed State = iota
	// Open refuses calls: the store is believed down, and a background probe
	// checks it every ProbeInterval.
	Open
)

// String returns "closed" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Shared is the error of a failure that several calls saw at once, such as
// a connection that broke with their batch on it. However many of them
// record it (or an error wrapping it), a Breaker counts one failure.
type Shared struct{ Err error }

func (s *Shared) Error() string { return s.Err.Error() }

// Unwrap returns the failure's error.
func (s *Shared) Unwrap() error { return s.Err }

// sharedOf returns the Shared that err is or wraps (through Unwrap() error),
// or nil. Unlike errors.As it does not allocate.
func sharedOf(err error) *Shared {
	for err != nil {
		if sh, ok := err.(*Shared); ok {
			return sh
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return nil
		}
		err = u.Unwrap()
	}
	return nil
}

// Defaults of Options.
const (
	DefaultFailures      = 5
	DefaultProbeInterval = 250 * time.Millisecond
)

// Options configures a Breaker. The zero value is usable: every field has a
// default.
type Options struct {
	// Failures is the number of consecutive failures (with no success in
	// between) that trips the breaker. Zero or less means DefaultFailures.
	Failures int

	// Window, when positive, also requires the last Failures failures to
	// fall within Window of each other: the breaker trips at a failure at
	// instant t only if the Failures-th most recent failure (counting this
	// one) happened at t-Window or later. It keeps a few failures spread over
	// a long quiet period from tripping the breaker. Zero or less means no
	// window: Failures consecutive failures trip the breaker however far
	// apart they are.
	Window time.Duration

	// ProbeInterval is the time between the end of one probe and the start
	// of the next while the breaker is open; the first probe starts one
	// ProbeInterval after the breaker trips. Zero or less means
	// DefaultProbeInterval.
	ProbeInterval time.Duration

	// Probe checks the store. It should fail whenever the calls it stands
	// for would (see the package documentation) and bound its own duration
	// (a short timeout); its context is canceled by Close.
	// Nil means no check: the breaker closes one ProbeInterval after it
	// trips (a plain cool-down), and the next calls act as the probe.
	Probe func(ctx context.Context) error

	// OnStateChange, if not nil, is called exactly once per transition, with
	// the state before and after it, in the order the transitions happen.
	// It is called synchronously while the breaker holds its lock, from the
	// goroutine that recorded the tripping failure or from the prober: it
	// must return quickly and must not call Record, RecordAt or Close
	// (Allow, State and Err are fine).
	OnStateChange func(from, to State)

	// Now is the clock Record reads on a failure. Nil means time.Now.
	Now func() time.Time
}

// A Breaker is a circuit breaker. Create one with New; its methods are safe
// for concurrent use. The methods of a nil *Breaker behave as a breaker that
// is always closed and never trips, so a caller with no store to protect can
// use one unconditionally.
type Breaker struct {
	// Hot path: read without the lock.
	state atomic.Int32 // State
	fails atomic.Int32 // copy of n, so that a success can skip the lock

	// err is the error of the failure that tripped the breaker, then of
	// the last failed probe.
	err atomic.Pointer[error]

	failures      int
	window        time.Duration
	probeInterval time.Duration
	probe         func(context.Context) error
	onChange      func(from, to State)
	now           func() time.Time

	ctx    context.Context // canceled by Close; the probes' context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the prober

	mu      sync.Mutex
	n       int         // consecutive failures recorded while closed
	times   []time.Time // with a window: ring of the last failures' instants
	shared  *Shared     // the last Shared failure counted
	stopped bool        // Close was called
}

// New returns a closed Breaker configured by o.
func New(o Options) *Breaker {
	b := &Breaker{
		failures:      o.Failures,
		window:        o.Window,
		probeInterval: o.ProbeInterval,
		probe:         o.Probe,
		onChange:      o.OnStateChange,
		now:           o.Now,
	}
	if b.failures <= 0 {
		b.failures = DefaultFailures
	}
	if b.window < 0 {
		b.window = 0
	}
	if b.window > 0 {
		b.times = make([]time.Time, b.failures)
	}
	if b.probeInterval <= 0 {
		b.probeInterval = DefaultProbeInterval
	}
	if b.probe == nil {
		b.probe = func(context.Context) error { return nil }
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// State returns the current state.
func (b *Breaker) State() State {
	if b == nil {
		return Closed
	}
	return State(b.state.Load())
}

// Err returns why the breaker is open: the error of the failure that
// tripped it, or of the latest probe that failed since. It returns nil
// while the breaker is closed.
func (b *Breaker) Err() error {
	if b == nil || b.State() == Closed {
		return nil
	}
	if p := b.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Allow reports whether the caller may call the store: true while the
// breaker is closed. When it reports false the caller must not call the store
// and decides without it.
func (b *Breaker) Allow() bool {
	return b == nil || b.state.Load() == int32(Closed)
}

// Record records the outcome of a call to the store: err is what the call
// returned. It reads the clock (Options.Now) only when err counts as a
// failure. See RecordAt.
func (b *Breaker) Record(err error) {
	if b.isFailure(err) {
		b.failure(b.now(), err)
	}
}

// RecordAt records, at the instant now, the outcome of a call to the store.
//
// A nil err is a success: it resets the count of consecutive failures. An
// err that is or wraps context.Canceled is not counted at all: the caller
// (the client of the request) went away, which says nothing about the store.
// Any other error is a failure, context.DeadlineExceeded and network errors
// included. The caller should pass nil for errors that are answers from the
// store rather than signs it is unavailable (redis.Nil, a script's own
// error), or not record them.
//
// Outcomes recorded while the breaker is open, or after Close, are ignored.
func (b *Breaker) RecordAt(now time.Time, err error) {
	if b.isFailure(err) {
		b.failure(now, err)
	}
}

// isFailure records a success (nil err) and reports whether err counts as
// a failure (see RecordAt).
func (b *Breaker) isFailure(err error) bool {
	if b == nil {
		return false
	}
	if err == nil {
		b.success()
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// success resets the failure count. When there is none, the common case, it
// is a single atomic load.
func (b *Breaker) success() {
	if b.fails.Load() == 0 {
		return
	}
	b.mu.Lock()
	if !b.stopped && State(b.state.Load()) == Closed {
		b.n = 0
		b.fails.Store(0)
	}
	b.mu.Unlock()
}

// failure counts a failure (err) at now and trips the breaker when it is
// the Failures-th consecutive one (within the window, if any).
func (b *Breaker) failure(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || State(b.state.Load()) != Closed {
		return
	}
	if sh := sharedOf(err); sh != nil {
		if sh == b.shared {
			return // counted already, by another call of its batch
		}
		b.shared = sh
	}
	trip := false
	if b.window > 0 {
		// times is a ring of the last len(times) failures; after this write,
		// the slot at index n%len(times) holds the oldest of them.
		b.times[b.n%len(b.times)] = now
		b.n++
		if b.n >= b.failures {
			oldest := b.times[b.n%len(b.times)]
			trip = now.Sub(oldest) <= b.window
		}
		// Keep n bounded while failures stay too far apart to trip.
		if !trip && b.n >= 2*b.failures {
			b.n -= b.failures
		}
	} else {
		b.n++
		trip = b.n >= b.failures
	}
	if !trip {
		b.fails.Store(int32(min(b.n, 1<<30)))
		return
	}
	b.n = 0
	b.fails.Store(0)
	cause := err // on the heap only when the breaker trips
	b.err.Store(&cause)
	b.state.Store(int32(Open))
	b.wg.Add(1)
	go b.prober()
	if b.onChange != nil {
		b.onChange(Closed, Open)
	}
}

// prober runs while the breaker is open: it calls probe every probeInterval
// until one succeeds, then closes the breaker. It exits early on Close.
func (b *Breaker) prober() {
	defer b.wg.Done()
	t := time.NewTimer(b.probeInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		err := b.probe(b.ctx)
		if err == nil {
			b.mu.Lock()
			if !b.stopped {
				b.n = 0
				b.fails.Store(0)
				b.state.Store(int32(Closed))
				if b.onChange != nil {
					b.onChange(Open, Closed)
				}
			}
			b.mu.Unlock()
			return
		}
		if b.ctx.Err() == nil {
			b.err.Store(&err)
		}
		t.Reset(b.probeInterval)
	}
}

// Close stops the prober, if one is running, and waits for it to exit (it
// cancels the context of a probe under way). After Close the breaker keeps
// the state it had but never changes state again: outcomes are ignored,
// OnStateChange is not called, and an open breaker stays open. Close may be
// called more than once.
func (b *Breaker) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}
