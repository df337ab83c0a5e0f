package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// release ends the concurrency leases of a request that has finished.
func (h *Handler) release(ctx context.Context, takes []taken) {
	ctx = context.WithoutCancel(ctx)
	for i := len(takes) - 1; i >= 0; i-- {
		if t := &takes[i]; t.z.lease {
			h.releaseLease(ctx, t)
		}
	}
}

// releaseLease gives back the concurrency lease t of a request that has
// finished. While its Redis's breaker is open the lease is queued for a
// retry without a call (which would only wait for its timeout, and hold
// the response's end that long); a release that fails is queued too, and
// counts toward the breaker as a take's failure does.
func (h *Handler) releaseLease(ctx context.Context, t *taken) {
	var b *breaker.Breaker // nil: the fallback's memory store
	if t.st == t.z.store {
		if b = h.breakerFor(ctx, t.z, t.key); !b.Allow() {
			h.releaseLater(t)
			return
		}
	}
	if err := t.st.Undo(ctx, t.key, time.Time{}, t.cost, t.d); err != nil {
		if !redisstore.SlotRefused(err) { // see take
			b.Record(err)
		}
		h.releaseFailed(t, err)
	}
}

// leasesInFlight are the admissions held by the requests in flight (store
// redis only), for a stop to give their concurrency leases back: Caddy
// cleans the handler up once its grace period is over and then exits, and
// a request still running then would otherwise keep its slot in Redis for
// the zone's window (a day with max_concurrent).
type leasesInFlight struct {
	mu   sync.Mutex
	held map[*taken][]taken // by the first of a request's admissions
}

func (l *leasesInFlight) add(held []taken) {
	l.mu.Lock()
	if l.held == nil {
		l.held = make(map[*taken][]taken)
	}
	l.held[&held[0]] = held
	l.mu.Unlock()
}

func (l *leasesInFlight) remove(held []taken) {
	l.mu.Lock()
	delete(l.held, &held[0])
	l.mu.Unlock()
}

// exitRelease bounds how long a stop waits for Redis to release the leases
// of the requests in flight.
const exitRelease = 2 * time.Second

// releaseOnExit releases, when the process exits, the concurrency leases
// of the requests in flight, which end with it: h's own (when own is set)
// and those of the handlers of unloaded configs still draining (see
// drainingHandlers). Releasing a lease again when its request does end is
// harmless (see pendingReleases).
func (h *Handler) releaseOnExit(own bool) {
	handlers := h.drainingSet().take()
	h.dropDrainingSet()
	if own {
		handlers = append(handlers, h)
	}
	releaseLeasesOf(handlers)
}

// releaseDrainingOnExit releases the leases of the requests in flight of
// every handler still draining (see drainingHandlers), when the process
// exits: a stop after a reload to a config without rate_limit handlers
// cleans up none of this package's handlers. Caddy calls it (registered
// with caddy.OnExit) after it has stopped the config it ran.
func releaseDrainingOnExit(context.Context) {
	var sets []*drainingHandlers
	pool.Range(func(k, v any) bool {
		if _, ok := k.(drainingKey); ok {
			sets = append(sets, v.(*drainingHandlers))
		}
		return true
	})
	var handlers []*Handler
	for _, d := range sets {
		handlers = append(handlers, d.take()...)
	}
	releaseLeasesOf(handlers)
}

// releaseLeasesOf releases the concurrency leases of the requests in
// flight of handlers, all at once, within exitRelease.
func releaseLeasesOf(handlers []*Handler) {
	if len(handlers) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), exitRelease)
	defer cancel()
	var wg sync.WaitGroup
	for _, o := range handlers {
		for _, t := range o.rt.leases.leases() {
			wg.Go(func() {
				if err := t.st.Undo(ctx, t.key, time.Time{}, t.cost, t.d); err != nil {
					o.logStoreError(t.z, t.key, err)
				}
			})
		}
	}
	wg.Wait()
}

// leases returns the concurrency leases the requests in flight hold.
func (l *leasesInFlight) leases() []taken {
	l.mu.Lock()
	defer l.mu.Unlock()
	var takes []taken
	for _, held := range l.held {
		for _, t := range held {
			if t.z.lease {
				takes = append(takes, t)
			}
		}
	}
	return takes
}

// drainingHandlers are the handlers of unloaded configs whose requests
// are still in flight (Cleanup left them to releaseWhenIdle), so that a
// stop after a reload gives back their leases too: Caddy cleans up only
// the config it stops. Held in the pool, shared by the handlers of a pool
// scope (see drainingSet).
type drainingHandlers struct {
	mu  sync.Mutex
	set map[*Handler]struct{}
}

// drainingKey is the pool key of the drainingHandlers of a pool scope.
type drainingKey struct{ scope string }

func (*drainingHandlers) Destruct() error { return nil }

func (d *drainingHandlers) add(h *Handler) {
	d.mu.Lock()
	d.set[h] = struct{}{}
	d.mu.Unlock()
}

func (d *drainingHandlers) remove(h *Handler) {
	d.mu.Lock()
	delete(d.set, h)
	d.mu.Unlock()
}

// take empties d and returns the handlers it held: their leases are
// about to be given back, once.
func (d *drainingHandlers) take() []*Handler {
	d.mu.Lock()
	defer d.mu.Unlock()
	hs := make([]*Handler, 0, len(d.set))
	for h := range d.set {
		hs = append(hs, h)
	}
	clear(d.set)
	return hs
}

// drainingSet loads the drainingHandlers of h's pool scope, taking a
// reference that dropDrainingSet gives back.
func (h *Handler) drainingSet() *drainingHandlers {
	v, _, _ := pool.LoadOrNew(drainingKey{h.rt.opts.poolScope}, func() (caddy.Destructor, error) {
		return &drainingHandlers{set: make(map[*Handler]struct{})}, nil
	})
	return v.(*drainingHandlers)
}

func (h *Handler) dropDrainingSet() {
	_, _ = pool.Delete(drainingKey{h.rt.opts.poolScope})
}

// exiting reports whether the process is exiting (see provisionOptions).
func (h *Handler) exiting() bool {
	if h.rt.opts.exiting != nil {
		return h.rt.opts.exiting()
	}
	return caddy.Exiting()
}
