package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/store"
)

// pendingReleases holds the concurrency leases whose release failed (a
// Redis that did not answer in time) and gives them back once Redis
// answers. A lease holds its slot until its window ends, a day with
// max_concurrent: one lost release would refuse the key long after its
// request ended. Releasing a lease removes it by its token, so sending a
// release again is harmless even when Redis applied the first one and
// only its answer was lost.
type pendingReleases struct {
	mu      sync.Mutex
	items   []pendingRelease
	running bool // a goroutine retries items
}

type pendingRelease struct {
	t     taken
	until time.Time // the lease has expired on its own by then
	// forget, when set, gives back instead a lease whose take failed
	// (store.Unsettled): Redis may have taken it all the same.
	forget func(context.Context) error
}

const (
	// maxPendingReleases bounds what a long outage keeps: beyond it a
	// failed release is dropped, and its lease ends with its window.
	maxPendingReleases = 10000
	// The first retry comes releaseRetryFirst after the failure, the
	// next ones twice as late each time, at most releaseRetryMost apart.
	releaseRetryFirst = 250 * time.Millisecond
	releaseRetryMost  = 30 * time.Second
)

// pending is how many releases wait for a retry, or are being retried
// (then at least 1).
func (p *pendingReleases) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return max(len(p.items), 1)
	}
	return len(p.items)
}

// releaseFailed logs and counts the failure err of t's release, and
// queues it for a retry.
func (h *Handler) releaseFailed(t *taken, err error) {
	h.logStoreError(t.z, t.key, err)
	t.z.m.storeErrors.Inc()
	h.releaseLater(t)
}

// releaseLater queues t's release for a retry.
func (h *Handler) releaseLater(t *taken) {
	h.queueRelease(pendingRelease{t: *t})
}

// forgetLater queues the forget of a take of key in zone z that failed
// unsettled (see store.Unsettled): once Redis answers, the lease that take
// may have made is given back, or kept from being made.
func (h *Handler) forgetLater(z *zone, key string, u *store.Unsettled) {
	h.queueRelease(pendingRelease{t: taken{z: z, key: key}, forget: u.Forget})
}

// queueRelease queues it for a retry, until its zone's window has passed.
func (h *Handler) queueRelease(it pendingRelease) {
	p := h.rt.releases
	if p == nil {
		return
	}
	window := time.Duration(0)
	if len(it.t.z.tiers) > 0 {
		window = it.t.z.tiers[0].Window
	}
	it.until = time.Now().Add(window)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.items) >= maxPendingReleases {
		return
	}
	p.items = append(p.items, it)
	if !p.running {
		p.running = true
		go h.retryReleases(p)
	}
}

// retryReleases gives back the queued leases until none is left: those
// whose release succeeds, expired, or whose client was closed (the config
// was unloaded) leave the queue. While the breaker of a lease's Redis (its
// master's, on a Cluster) is open, its release waits without calling
// Redis.
func (h *Handler) retryReleases(p *pendingReleases) {
	wait := releaseRetryFirst
	for {
		time.Sleep(wait)
		wait = min(2*wait, releaseRetryMost)
		p.mu.Lock()
		items := p.items
		p.items = nil
		p.mu.Unlock()
		var left []pendingRelease
		for _, it := range items {
			t := &it.t
			if time.Now().After(it.until) {
				continue
			}
			if !h.breakerFor(context.Background(), t.z, t.key).Allow() {
				left = append(left, it)
				continue
			}
			var err error
			if it.forget != nil {
				err = it.forget(context.Background())
			} else {
				err = t.st.Undo(context.Background(), t.key, time.Time{}, t.cost, t.d)
			}
			switch {
			case err == nil:
				h.rt.logger.Debug("released a concurrency lease on a retry", zap.String("zone", t.z.name))
			case errors.Is(err, redis.ErrClosed):
			default:
				left = append(left, it)
			}
		}
		p.mu.Lock()
		p.items = append(left, p.items...)
		if len(p.items) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
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
