package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// take decides zone z for key: one call to the zone's store. When the store
// fails (Redis down or slow), on_error local decides with the zone's memory
// fallback instead; with open and closed the error goes back to ServeHTTP,
// which lets the request through or answers 503.
//
// While the client's circuit breaker is open the store is not called at
// all: the request is decided by on_error at once.
func (h *Handler) take(ctx context.Context, z *zone, key string, cost int64) (algorithms.Decision, store.Store, error) {
	var d algorithms.Decision
	err := errBreakerOpen
	if z.breaker.Allow() {
		start := time.Now()
		if d, ok := z.denies.get(key, start); ok {
			return d, z.store, nil // still denied: no need to ask Redis
		}
		var at time.Time // zero: the store's clock (Redis TIME, a test's)
		if z.sharesClock {
			at = start // one clock reading for the memory store and the metric
		}
		d, err = z.store.Take(ctx, key, at, cost)
		z.m.observe(start)
		if err == nil {
			z.breaker.Record(nil)
			if !d.Allowed && z.denies != nil {
				// From the reply's arrival: the cached denial ends no
				// earlier than Redis's.
				z.denies.put(key, time.Now(), d)
			}
			return d, z.store, nil
		}
		if ctx.Err() != nil {
			// The client went away: not a failure of the store.
			return d, z.store, err
		}
		z.breaker.Record(err)
		z.m.storeErrors.Inc()
		h.logStoreError(z, key, err)
	}
	z.m.failed.Inc()
	if z.fallback != nil {
		d, err = z.fallback.Take(ctx, key, time.Time{}, cost)
		return d, z.fallback, err
	}
	return d, z.store, err
}

// errBreakerOpen is the error of a decision not asked of Redis because its
// circuit breaker is open.
var errBreakerOpen = errors.New("redis circuit breaker open (repeated failures): not called")

// unavailable answers a request that on_error closed refuses because the
// store failed: 503, for the site's handle_errors routes when it has them.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, z *zone, err error) error {
	w.Header().Set("Retry-After", "1")
	if h.useErrorRoutes(r) {
		return caddyhttp.Error(http.StatusServiceUnavailable,
			fmt.Errorf("rate limit store unavailable in zone %q (on_error closed): %w", z.name, err))
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	return nil
}

// storeErrorLogEvery is how often, at most, a zone logs a store failure at
// warn level; the others go to debug, so that an outage of the store does
// not write a line per request.
const storeErrorLogEvery = 10 * time.Second

// logThrottle picks the level of a failure's log line: warn at most once
// per storeErrorLogEvery, debug for the others.
type logThrottle struct {
	last atomic.Int64 // unix ns of the last line at warn
}

func (t *logThrottle) level() zapcore.Level {
	now, last := time.Now().UnixNano(), t.last.Load()
	if now-last >= int64(storeErrorLogEvery) && t.last.CompareAndSwap(last, now) {
		return zapcore.WarnLevel
	}
	return zapcore.DebugLevel
}

// logStoreError logs a failure of z's store.
func (h *Handler) logStoreError(z *zone, key string, err error) {
	if c := h.rt.logger.Check(z.storeErrLog.level(), "rate limit store failed"); c != nil {
		fields := []zap.Field{zap.String("zone", z.name), zap.String("on_error", h.OnError), zap.Error(err)}
		if h.LogKeys {
			fields = append(fields, zap.String("key", key))
		}
		c.Write(fields...)
	}
}
