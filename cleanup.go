package ratelimit

import (
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Cleanup releases the zones' state: a store no other config load uses is
// destroyed.
func (h *Handler) Cleanup() error {
	var pending *pendingCollector // reports the releases until they drain
	if h.rt.metrics != nil {
		pending = h.rt.metrics.pending
		for _, z := range h.rt.zones {
			h.rt.metrics.zones.remove(z)
			h.rt.metrics.dropZone(z.name)
		}
		h.rt.metrics = nil // once: a zone's series go with its last user
	}
	keys := h.rt.poolKeys
	h.rt.poolKeys = nil
	draining := h.rt.inflight != nil && (h.rt.inflight.Load() > 0 || h.rt.releases.pending() > 0)
	exiting := h.exiting()
	if exiting {
		// The requests in flight end with the process: this config's,
		// and those of configs a reload unloaded before (Caddy cleans
		// up only the config it stops; releaseDrainingOnExit covers a
		// stopped config without rate_limit handlers).
		h.releaseOnExit(draining)
	}
	if draining {
		var d *drainingHandlers
		if !exiting { // else its leases were given back just now
			d = h.drainingSet()
			d.add(h)
		}
		go func() {
			h.releaseWhenIdle(keys)
			pending.remove(h.rt.releases)
			if d != nil {
				d.remove(h)
				h.dropDrainingSet()
			}
		}()
		return nil
	}
	pending.remove(h.rt.releases)
	return releasePoolKeys(keys)
}

// drainLimit bounds how long Cleanup's release waits for requests still
// in flight (a request held by on_limit wait, a slow upstream) and for
// the releases of leases to retry (a Redis that did not answer), but for
// concurrency leases (see drainFor).
const drainLimit = 5 * time.Minute

// drainFor is how long Cleanup's release waits at most: drainLimit, or
// the longest window of the handler's concurrency zones, beyond which
// their leases have expired in Redis on their own. Until then a request
// still running (an upload, a stream) must be able to release its lease
// when it ends, or when the process exits (the handler stays among the
// draining ones), with the Redis client it was taken with.
func (h *Handler) drainFor() time.Duration {
	d := drainLimit
	for _, z := range h.rt.zones {
		if z.lease && len(z.tiers) > 0 {
			d = max(d, z.tiers[0].Window)
		}
	}
	return d
}

// drainPoll is how often releaseWhenIdle looks whether the handler's
// requests have ended.
const drainPoll = 20 * time.Millisecond

// releaseWhenIdle releases keys once no request of the handler is in
// flight any more and no lease waits for its release to be retried (the
// Redis client they need is among keys), or after drainFor.
func (h *Handler) releaseWhenIdle(keys []any) {
	deadline := time.Now().Add(h.drainFor())
	for (h.rt.inflight.Load() > 0 || h.rt.releases.pending() > 0) && time.Now().Before(deadline) {
		time.Sleep(drainPoll)
	}
	if err := releasePoolKeys(keys); err != nil {
		h.rt.logger.Error("releasing rate limit state", zap.Error(err))
	}
}

// releasePoolKeys releases pool entries, latest first: a zone's store (the
// two-layer store makes a last push) before the Redis client it uses.
func releasePoolKeys(keys []any) error {
	var errs []error
	for _, k := range slices.Backward(keys) {
		if _, err := pool.Delete(k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
