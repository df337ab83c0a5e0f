package ratelimit

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// pendingReleases holds the concurrency leases whose release failed (a
// Redis that did not answer in time), and the takes to forget (a take
// that failed unsettled, see store.Unsettled), and gives them back once
// Redis answers. A lease holds its slot until its window ends, a day with
// max_concurrent: one lost release would refuse the key long after its
// request ended. Releasing a lease removes it by its token, so sending a
// release again is harmless even when Redis applied the first one and
// only its answer was lost.
//
// Each item has its own backoff: a release queued while others have
// failed for a minute is tried after releaseRetryFirst too. While the
// breaker of an item's Redis is open the item is not sent, and costs no
// backoff: it is looked at again every releaseRetryFirst, so it goes
// out within that of the breaker closing.
type pendingReleases struct {
	mu      sync.Mutex
	items   []pendingRelease
	trying  []pendingRelease // the items of the pass under way, out of items
	running bool             // a goroutine retries items
	kick    chan struct{}    // wakes it for an item queued (made with running)
	full    bool             // an item was dropped since the queue last had room
}

type pendingRelease struct {
	t     taken
	until time.Time // the lease has expired on its own by then
	// forget, when set, gives back instead a lease whose take failed
	// (store.Unsettled): Redis may have taken it all the same.
	forget func(context.Context) error
	next   time.Time     // when to try it
	wait   time.Duration // the last gap between tries: doubled by a failed one
}

const (
	// maxPendingReleases bounds what a long outage keeps: beyond it a
	// failed release is dropped, and its lease ends with its window.
	maxPendingReleases = 10000
	// The first retry comes releaseRetryFirst after the failure, the
	// next ones twice as late each time, at most releaseRetryMost apart.
	releaseRetryFirst = 250 * time.Millisecond
	releaseRetryMost  = 30 * time.Second
	// forgetAtLeast is how long a forget is kept at least, whatever the
	// window: a take that Redis runs late makes a lease that lasts a
	// window from then.
	forgetAtLeast = 5 * time.Minute
)

// tried is what one try of a pending release came to.
type tried uint8

const (
	triedDone    tried = iota // given back, or nothing left to give back
	triedBlocked              // not sent: the breaker is open
	triedFailed               // sent, and failed
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

// countByZone adds to n the number of items of each zone.
func (p *pendingReleases) countByZone(n map[string]float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, items := range [][]pendingRelease{p.items, p.trying} {
		for i := range items {
			n[items[i].t.z.name]++
		}
	}
}

// add queues it at now, with keep its lifetime, and reports whether it
// was queued (not beyond maxPendingReleases), whether it is the first
// item dropped since the queue last had room, and whether a goroutine
// must be started to retry the queue.
func (p *pendingReleases) add(now time.Time, it pendingRelease, keep time.Duration) (queued, firstDrop, start bool) {
	it.until = now.Add(keep)
	it.next, it.wait = now.Add(releaseRetryFirst), releaseRetryFirst
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.items) >= maxPendingReleases {
		firstDrop, p.full = !p.full, true
		return false, firstDrop, false
	}
	p.items = append(p.items, it)
	if p.running {
		select {
		case p.kick <- struct{}{}:
		default: // woken already
		}
		return true, false, false
	}
	p.running, p.kick = true, make(chan struct{}, 1)
	return true, false, true
}

// pass tries, at now, every item due, and returns when the next one is
// due, or false when the queue is empty (the goroutine then stops:
// running is cleared).
func (p *pendingReleases) pass(now time.Time, try func(*pendingRelease) tried) (time.Time, bool) {
	p.mu.Lock()
	items := p.items
	p.items, p.trying = nil, items
	p.mu.Unlock()
	var left []pendingRelease
	for _, it := range items {
		switch {
		case now.After(it.until):
			continue // its lease has expired on its own
		case now.Before(it.next):
		default:
			switch try(&it) {
			case triedDone:
				continue
			case triedBlocked:
				it.next = now.Add(releaseRetryFirst)
			case triedFailed:
				it.wait = min(2*it.wait, releaseRetryMost)
				it.next = now.Add(it.wait)
			}
		}
		left = append(left, it)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.items, p.trying = append(left, p.items...), nil
	if len(p.items) < maxPendingReleases {
		p.full = false
	}
	if len(p.items) == 0 {
		p.running = false
		return time.Time{}, false
	}
	next := p.items[0].next
	for _, it := range p.items[1:] {
		if it.next.Before(next) {
			next = it.next
		}
	}
	return next, true
}

// reportPendingReleases has the metrics report the handler's pending
// releases, for its concurrency zones on Redis (Cleanup stops it once they
// have drained).
func (h *Handler) reportPendingReleases() {
	if h.rt.releases == nil {
		return
	}
	var names []string
	for _, z := range h.rt.zones {
		if z.lease {
			names = append(names, z.name)
		}
	}
	if names != nil {
		h.rt.metrics.pending.add(h.rt.releases, names)
	}
}

// releaseFailed logs and counts the failure err of t's release, and
// queues it for a retry.
func (h *Handler) releaseFailed(t *taken, err error) {
	h.logStoreError(t.z, t.key, err)
	t.z.m.storeErrors.Inc()
	h.releaseLater(t)
}

// releaseLater queues t's release for a retry, until its window ends (a
// concurrency zone has one tier: maxWindow is how long a lease lives).
func (h *Handler) releaseLater(t *taken) {
	h.queueRelease(pendingRelease{t: *t}, t.z.maxWindow)
}

// forgetLater queues the forget of a take of key in zone z that failed
// unsettled (see store.Unsettled): once Redis answers, the lease that take
// may have made is given back, or kept from being made.
func (h *Handler) forgetLater(z *zone, key string, u *store.Unsettled) {
	h.queueRelease(pendingRelease{t: taken{z: z, key: key}, forget: u.Forget}, max(z.maxWindow, forgetAtLeast))
}

// queueRelease queues it for a retry, for keep at most.
func (h *Handler) queueRelease(it pendingRelease, keep time.Duration) {
	p := h.rt.releases
	if p == nil {
		return
	}
	queued, firstDrop, start := p.add(time.Now(), it, keep)
	if firstDrop {
		h.rt.logger.Warn("too many concurrency leases wait for Redis to give them back: the next ones are not kept, and hold their slots until their window ends",
			zap.String("zone", it.t.z.name), zap.Int("kept", maxPendingReleases))
	}
	if queued && start {
		go h.retryReleases(p)
	}
}

// retryReleases gives back the queued leases until none is left: those
// whose release succeeds, expired, or whose client was closed (the config
// was unloaded) leave the queue. While the breaker of a lease's Redis (its
// master's, on a Cluster) is open, its release waits without calling
// Redis.
func (h *Handler) retryReleases(p *pendingReleases) {
	timer := time.NewTimer(releaseRetryFirst)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-p.kick:
		}
		next, ok := p.pass(time.Now(), h.tryRelease)
		if !ok {
			return
		}
		timer.Reset(time.Until(next))
	}
}

// tryRelease sends it once, unless its breaker is open. Its outcome
// feeds the breaker as a request's call does: with Redis hung and no
// traffic nothing else would find Redis down, and every item of a pass
// would wait its own read_timeout; once the breaker is open the rest wait
// for its probe instead.
func (h *Handler) tryRelease(it *pendingRelease) tried {
	t := &it.t
	ctx := context.Background()
	b := h.breakerFor(ctx, t.z, t.key)
	if !b.Allow() {
		return triedBlocked
	}
	var err error
	if it.forget != nil {
		err = it.forget(ctx)
	} else {
		err = t.st.Undo(ctx, t.key, time.Time{}, t.cost, t.d)
	}
	switch {
	case err == nil:
		b.Record(nil)
		h.rt.logger.Debug("released a concurrency lease on a retry", zap.String("zone", t.z.name))
		return triedDone
	case redisstore.Closed(err):
		return triedDone // the config was unloaded: nothing can send it
	}
	if !redisstore.SlotRefused(err) { // see take
		b.Record(err)
	}
	t.z.m.storeErrors.Inc()
	h.rt.logger.Debug("giving back a concurrency lease failed again: retried later", zap.String("zone", t.z.name), zap.Error(err))
	return triedFailed
}
