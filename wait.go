package ratelimit

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// on_limit wait holds a request its zone denied until the zone admits it,
// as golang.org/x/time/rate's Limiter.Wait does, except that the quota is
// in the store (memory or Redis) and that the requests of one key wait in
// line:
//
//   - Each zone has its lines (waitLines), one per key that has waiting
//     requests; a line is removed when its last waiter leaves, and a zone
//     holds at most max_waiters waiters over all its keys (more are
//     rejected at once), so the memory and goroutines it holds are bounded.
//   - Only the head of a line asks the store, at most once per Retry-After
//     of the key's latest denial (or per leasePoll for concurrency). The
//     others sleep until the waiter ahead of them leaves (admitted, out of
//     time, or its client gone), which wakes the next: a key admits its
//     waiters in arrival order, and however many wait, the store is asked
//     about the key as often as if one did.
//   - A request that arrives while its key has a line joins the end of the
//     line without asking the store: an admission there would take the
//     quota the line is waiting for.
//
// Time is read with Handler.now and slept with Handler.sleepFor: the
// handler's clock (provisionOptions), which tests make synthetic.

const (
	// maxMaxWait is the longest max_wait allowed. A waiting request holds
	// a connection, a goroutine and a place in line; clients and proxies
	// commonly give up after a minute (nginx's proxy_read_timeout, cloud
	// load balancers' idle timeouts), so a longer wait mostly ends in a
	// response nobody reads. It is also well below drainLimit, so that a
	// reload never releases the state of requests still waiting.
	maxMaxWait = time.Minute

	// defaultMaxWaiters is how many requests a zone holds waiting at most,
	// over all its keys, when max_waiters is not set: at worst a thousand
	// connections and goroutines (tens of MB), and more than a key
	// admitting up to 16 requests a second lets in within maxMaxWait, so
	// that those beyond it would mostly have waited only to be rejected.
	defaultMaxWaiters = 1000
)

// waitLines are the lines of one zone's waiting requests, per key.
type waitLines struct {
	max  int64         // the most waiters over all keys (max_waiters)
	held *atomic.Int64 // the zone's waiters in every config load (see waitCount)

	mu    sync.Mutex
	n     int                  // this config load's waiters over all keys
	lines map[string]*waitLine // keys with waiters only
}

// waitCount is how many requests a zone holds waiting over the config
// loads that define it, pooled across reloads: after a reload the old
// config's waiters wait on (up to their max_wait) in lines of its own,
// and max_waiters bounds them together with the new config's.
type waitCount struct{ atomic.Int64 }

func (*waitCount) Destruct() error { return nil }

// take takes a place among the zone's waiters: false when it holds max.
func (wl *waitLines) take() bool {
	for {
		n := wl.held.Load()
		if n >= wl.max {
			return false
		}
		if wl.held.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// waitLine is the line of one key.
type waitLine struct {
	waiters []*waiter // in arrival order; waiters[0], the head, asks the store

	// last is the key's latest denial, made at lastAt: when the key may
	// be admitted again, and what the waiters rejected without asking the
	// store are answered.
	last   algorithms.Decision
	lastAt time.Time
}

// waiter is one request in line.
type waiter struct {
	// promote ends the waiter's sleep when it becomes the head.
	promote context.CancelFunc
	cost    int64 // the units it asks for
}

// newWaitLines returns the lines of a zone with max_waiters max, whose
// waiters over its config loads held counts.
func newWaitLines(max int, held *atomic.Int64) *waitLines {
	return &waitLines{max: int64(max), held: held, lines: make(map[string]*waitLine)}
}

// joinResult is what join did.
type joinResult uint8

const (
	joined  joinResult = iota // in line; head tells whether at its head
	noLine                    // the key has no line: ask the store first
	tooLate                   // the key cannot admit before the deadline: reject
	full                      // the zone holds max waiters: reject
)

// join puts w at the end of key's line. d is the request's own denial,
// made at now, or nil when it did not ask the store: then it joins only a
// line that exists. wait is how long after a denial the key is asked again
// (see zone.retryWait); behind, if not nil, reports whether a request
// behind waiters for ahead units cannot be let through before the
// deadline, given the key's latest denial as seen now (see
// zone.shapedBehind). It returns, except when joined, the denial to reject
// the request with.
func (wl *waitLines) join(key string, w *waiter, d *algorithms.Decision, now, deadline time.Time, wait func(algorithms.Decision) time.Duration,
	behind func(last algorithms.Decision, ahead int64, left time.Duration) (algorithms.Decision, bool)) (res joinResult, head bool, denial algorithms.Decision) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	l := wl.lines[key]
	if l == nil && d == nil {
		return noLine, false, algorithms.Decision{}
	}
	last, lastAt := l.latest(d, now)
	if lastAt.Add(wait(last)).After(deadline) {
		return tooLate, false, since(last, lastAt, now)
	}
	if l != nil && behind != nil {
		var ahead int64
		for _, x := range l.waiters {
			ahead = min(ahead, math.MaxInt64-x.cost) + x.cost
		}
		if denial, late := behind(since(last, lastAt, now), ahead, deadline.Sub(now)); late {
			return tooLate, false, denial
		}
	}
	if !wl.take() {
		return full, false, since(last, lastAt, now)
	}
	if l == nil {
		l = new(waitLine)
		wl.lines[key] = l
	}
	l.last, l.lastAt = last, lastAt
	l.waiters = append(l.waiters, w)
	wl.n++
	return joined, len(l.waiters) == 1, algorithms.Decision{}
}

// hold takes a place among the waiters for a request held outside any
// line (a shaped admission): false when the zone holds max waiters.
func (wl *waitLines) hold() bool {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if !wl.take() {
		return false
	}
	wl.n++
	return true
}

// release gives back a place that hold took.
func (wl *waitLines) release() {
	wl.mu.Lock()
	wl.n--
	wl.mu.Unlock()
	wl.held.Add(-1)
}

// latest is the newer of the line's denial and d (at now); l may be nil
// when d is not.
func (l *waitLine) latest(d *algorithms.Decision, now time.Time) (algorithms.Decision, time.Time) {
	if d != nil {
		return *d, now
	}
	return l.last, l.lastAt
}

// denied records d, the head's denial made at now.
func (wl *waitLines) denied(key string, d algorithms.Decision, now time.Time) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if l := wl.lines[key]; l != nil {
		l.last, l.lastAt = d, now
	}
}

// ready returns when the key may be asked again: the end of its latest
// denial's wait.
func (wl *waitLines) ready(key string, wait func(algorithms.Decision) time.Duration) time.Time {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	l := wl.lines[key]
	return l.lastAt.Add(wait(l.last))
}

// leave takes w out of key's line, promotes the next waiter if w was the
// head, and removes the line once empty. It returns the key's latest
// denial as seen at now, to reject w with.
func (wl *waitLines) leave(key string, w *waiter, now time.Time) algorithms.Decision {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	l := wl.lines[key]
	for i, x := range l.waiters {
		if x != w {
			continue
		}
		l.waiters = slices.Delete(l.waiters, i, i+1)
		wl.n--
		wl.held.Add(-1)
		if i == 0 && len(l.waiters) > 0 {
			l.waiters[0].promote()
		}
		break
	}
	if len(l.waiters) == 0 {
		delete(wl.lines, key)
	}
	return since(l.last, l.lastAt, now)
}

// since is d, made at at, as seen at now: its waits shortened by the time
// passed.
func since(d algorithms.Decision, at, now time.Time) algorithms.Decision {
	passed := now.Sub(at)
	d.RetryAfter = max(d.RetryAfter-passed, 0)
	d.ResetAfter = max(d.ResetAfter-passed, 0)
	d.MoreAfter = max(d.MoreAfter-passed, 0)
	return d
}

// retryWait is how long after denial d the zone asks the store again.
func (z *zone) retryWait(d algorithms.Decision) time.Duration {
	wait := max(d.RetryAfter, time.Millisecond)
	if z.lease {
		// A lease usually ends long before the Retry-After of
		// concurrency (up to 1s): look again sooner.
		wait = min(wait, leasePoll)
	}
	return wait
}

// takeOrWait decides the request in zone z, a zone that waits (see waits;
// decide calls take for the others): a denied request waits in its key's
// line until it is admitted, for at most max_wait. It returns the decision (denied when the request
// could not be admitted in time or the zone holds too many waiters) and
// the store that made it, the context's error when the client went away,
// or the store's error. down is take's: set once a store call of the
// request failed.
//
// A request that the zone shapes (leaky_bucket) is admitted with the delay
// it is to be held for, and a place among the zone's waiters for that
// hold, given back by releaseShaped; a delay beyond max_wait, or no place
// left, rejects it instead (see holdShaped).
func (h *Handler) takeOrWait(ctx context.Context, z *zone, key string, cost int64, down *bool) (algorithms.Decision, store.Store, error) {
	deadline := h.now().Add(z.maxWait)
	d, st, err := h.waitTurn(ctx, z, key, cost, down, deadline)
	if err == nil && shaped(z, d) {
		// What the line took counts against max_wait too.
		if denial, ok := z.holdShaped(d, deadline.Sub(h.now())); !ok {
			h.giveBack(ctx, z, st, key, cost, d)
			return denial, st, nil
		}
	}
	return d, st, err
}

// waits reports whether a request denied in zone z waits in line
// (on_limit wait, not dry_run).
func (h *Handler) waits(z *zone) bool {
	return z.wait && !h.rt.dryRun
}

// waitTurn is takeOrWait's wait in line.
func (h *Handler) waitTurn(ctx context.Context, z *zone, key string, cost int64, down *bool, deadline time.Time) (algorithms.Decision, store.Store, error) {
	if _, never := z.neverAdmitted(cost); never {
		return h.take(ctx, z, key, cost, down) // no wait would admit it
	}
	var own *algorithms.Decision // the request's own denial, if it asked
	st := z.store
	wctx, promote := context.WithCancel(ctx)
	defer promote()
	w := &waiter{promote: promote, cost: cost}
	var behind func(algorithms.Decision, int64, time.Duration) (algorithms.Decision, bool)
	if z.shape {
		behind = z.shapedBehind
	}
	for {
		now := h.now()
		res, head, denial := z.waiters.join(key, w, own, now, deadline, z.retryWait, behind)
		switch res {
		case noLine:
			d, dst, err := h.take(ctx, z, key, cost, down)
			if err != nil || d.Allowed {
				return d, dst, err
			}
			if denial, late := z.shapedTooLate(d, deadline.Sub(now)); late {
				return denial, dst, nil
			}
			own, st = &d, dst
			continue
		case tooLate, full:
			return denial, st, nil
		}
		return h.waitInLine(ctx, wctx, z, key, cost, w, head, deadline, down)
	}
}

// waitInLine holds w, in key's line, until it is admitted at the head of
// the line or deadline passes. wctx is ctx, cancelled too when w is
// promoted to the head.
func (h *Handler) waitInLine(ctx, wctx context.Context, z *zone, key string, cost int64, w *waiter, head bool, deadline time.Time, down *bool) (algorithms.Decision, store.Store, error) {
	wl := z.waiters
	st := z.store
	for {
		if !head {
			err := h.sleepFor(wctx, deadline.Sub(h.now()))
			if ctx.Err() != nil {
				return wl.leave(key, w, h.now()), st, ctx.Err()
			}
			if err == nil {
				return wl.leave(key, w, h.now()), st, nil // out of time
			}
			head = true // promoted
		}
		// Not before the key's latest denial allows: after a head that
		// left early (its client gone) the next one waits the rest.
		if ready := wl.ready(key, z.retryWait); ready.After(h.now()) {
			if ready.After(deadline) {
				return wl.leave(key, w, h.now()), st, nil
			}
			if err := h.sleepFor(ctx, ready.Sub(h.now())); err != nil {
				return wl.leave(key, w, h.now()), st, err
			}
		}
		d, dst, err := h.take(ctx, z, key, cost, down)
		if err != nil {
			wl.leave(key, w, h.now())
			return d, dst, err
		}
		st = dst
		if d.Allowed {
			if ctx.Err() != nil {
				// The client went away: the admission goes to the
				// next in line, given back before it is promoted.
				h.giveBack(ctx, z, st, key, cost, d)
				wl.leave(key, w, h.now())
				return d, st, ctx.Err()
			}
			wl.leave(key, w, h.now())
			return d, st, nil
		}
		wl.denied(key, d, h.now())
	}
}

// giveBack undoes an admission of zone z whose request will not proceed.
func (h *Handler) giveBack(ctx context.Context, z *zone, st store.Store, key string, cost int64, d algorithms.Decision) {
	if err := st.Undo(context.WithoutCancel(ctx), key, time.Time{}, cost, d); err != nil {
		h.rt.logger.Debug("undoing a rate limit admission", zap.String("zone", z.name), zap.Error(err))
	}
}

// Shaping holds an admitted request for its Decision.Delay: the water
// ahead of it in the bucket, up to burst/rate (hours with a large burst
// and a low rate). Without a bound, a flood of keys would hold a
// connection and a goroutine per request for that long, so a shaped hold
// is bounded as a wait in line is: at most max_wait, and a place among the
// zone's max_waiters.

// shaped reports whether z holds admission d for its delay (takeOrWait
// then holds a place for it).
func shaped(z *zone, d algorithms.Decision) bool {
	return z.shape && d.Allowed && d.Delay > 0
}

// holdShaped takes a place among z's waiters for admission d, to be held
// for d.Delay. When the delay exceeds left (what is left of max_wait) or
// the zone holds max_waiters already, it returns false and the denial to
// reject the request with: Retry-After when the bucket would hold it no
// longer than max_wait, or, with no place left, when it would have been
// let through.
func (z *zone) holdShaped(d algorithms.Decision, left time.Duration) (algorithms.Decision, bool) {
	denial := d
	denial.Allowed = false
	denial.Delay = 0
	denial.Remaining = 0 // nothing passes now: t is the Retry-After
	if d.Delay > left {
		// Never earlier than the request, sent again with a max_wait
		// of its own, could pass (d.Delay - max_wait).
		denial.RetryAfter = d.Delay - max(min(left, z.maxWait), 0)
		denial.MoreAfter = denial.RetryAfter
		return denial, false
	}
	if !z.waiters.hold() {
		denial.RetryAfter = d.Delay
		denial.MoreAfter = denial.RetryAfter
		return denial, false
	}
	return algorithms.Decision{}, true
}

// shapedTooLate reports whether denial d of a zone that shapes leaves a
// request no way to be let through within left: admitted whenever the
// bucket has room, it would then be held until the water now in the
// bucket has drained, d.ResetAfter from now at the soonest. Then it
// returns the denial to reject it with at once, instead of after a wait
// in line: Retry-After when the request, sent again with a max_wait of its
// own, could pass (it would wait in line for room, then be held until
// then: d.ResetAfter - max_wait).
func (z *zone) shapedTooLate(d algorithms.Decision, left time.Duration) (algorithms.Decision, bool) {
	if !z.shape || d.Blocked || d.ResetAfter <= left {
		// A blocked key's wait is its block's (its Retry-After), which
		// join weighs.
		return d, false
	}
	d.RetryAfter = max(d.ResetAfter-z.maxWait, time.Microsecond)
	d.MoreAfter = d.RetryAfter
	return d, true
}

// shapedBehind is shapedTooLate for a request that joins a line behind
// waiters for ahead units: each of them is held until the water ahead of
// it has drained, so the request leaves no sooner than the water d saw
// (d.ResetAfter) and those units have drained at d's tier's rate. A
// request that would wait in line only to be rejected at max_wait is
// rejected at once.
func (z *zone) shapedBehind(d algorithms.Decision, ahead int64, left time.Duration) (algorithms.Decision, bool) {
	if ahead <= 0 || d.Blocked || d.Tier < 0 || d.Tier >= len(z.tiers) {
		return d, false
	}
	t := z.tiers[d.Tier]
	// A unit drains in Window/Events; the units ahead, in ahead times
	// that (at most forever: a Duration's largest).
	per := float64(t.Window) / float64(t.Events)
	if drain := float64(d.ResetAfter) + per*float64(ahead); drain < math.MaxInt64 {
		d.ResetAfter = time.Duration(drain)
	} else {
		d.ResetAfter = math.MaxInt64
	}
	return z.shapedTooLate(d, left)
}

// releaseShaped gives back the places that takeOrWait took for the shaped
// admissions among takes.
func (h *Handler) releaseShaped(takes []taken) {
	if h.rt.dryRun {
		return // takeOrWait does not wait in a dry run
	}
	for i := range takes {
		if t := &takes[i]; shaped(t.z, t.d) {
			t.z.waiters.release()
		}
	}
}
