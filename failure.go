package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// skipUndo reports whether giving back t would call a Redis that failed
// earlier in the request (down): it would most likely fail too, after
// another timeout. The admission then stays counted until its keys expire.
// The leasing store gives back to its lease, without Redis.
func skipUndo(t *taken, down bool) bool {
	if !down || t.z.breaker == nil || t.st != t.z.store {
		return false
	}
	_, lease := t.st.(*redisstore.LeaseStore)
	return !lease
}

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

// goRedisLogger forwards go-redis's own log lines (a connection pool that
// cannot dial, for example) to Caddy's logger under the module's name,
// instead of go-redis's default: stderr, in a format of its own. Like the
// store's failures, at warn at most once per storeErrorLogEvery and at
// debug otherwise: an outage makes go-redis log dozens of lines a second.
// Its routine lines (see isRoutine) go to info.
type goRedisLogger struct {
	logger   func() *zap.Logger
	throttle logThrottle
}

// Printf implements go-redis's Logging.
func (l *goRedisLogger) Printf(_ context.Context, format string, v ...any) {
	lvl := zapcore.InfoLevel
	if !isRoutine(format) {
		lvl = l.throttle.level()
	}
	lg := l.logger()
	if !lg.Core().Enabled(lvl) {
		return
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if c := lg.Check(lvl, msg); c != nil {
		c.Write(zap.String("source", "go-redis"))
	}
}

// isRoutine reports whether go-redis's line of format reports what a
// working client does (a Sentinel client finding its master), to be logged
// at info rather than as a failure.
func isRoutine(format string) bool {
	for _, p := range []string{"sentinel: selected addr=", "sentinel: new master=", "sentinel: discovered new sentinel="} {
		if strings.HasPrefix(format, p) {
			return true
		}
	}
	return false
}

// useGoRedisLogger makes Caddy's log, named for this module, go-redis's
// logger, for the clients of the Redis store. go-redis has one logger per
// process, whatever client logs: it is set when this module makes a Redis
// client, not when it is linked in, so that a Caddy with another plugin's
// go-redis client and no rate_limit Redis store keeps go-redis's logging
// as it was. It reads caddy.Log() at every line, which follows the logging
// config of the running Caddy.
func useGoRedisLogger() {
	name := string(Handler{}.CaddyModule().ID)
	redis.SetLogger(&goRedisLogger{logger: func() *zap.Logger { return caddy.Log().Named(name) }})
}

// logStoreError logs a failure of z's store.
func (h *Handler) logStoreError(z *zone, key string, err error) {
	if c := h.rt.logger.Check(z.storeErrLog.level(), "rate limit store failed"); c != nil {
		fields := []zap.Field{zap.String("zone", z.name), zap.String("on_error", h.OnError), zap.Error(err)}
		if hint := redisstore.Hint(err); hint != "" {
			fields = append(fields, zap.String("hint", hint))
		}
		if h.LogKeys {
			fields = append(fields, zap.String("key", key))
		}
		c.Write(fields...)
	}
}
