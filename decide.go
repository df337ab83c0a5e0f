package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// outcome is what deciding one zone made of the request.
type outcome uint8

const (
	zoneSkipped     outcome = iota // the zone does not apply, or lets it through unasked (on_error open)
	zoneAdmitted                   // admitted: the taken is kept, to undo or release
	zoneDenied                     // denied (by the store, empty_key deny, or a full wait line)
	zoneUnavailable                // the store failed and on_error closed refuses: 503
	zoneFailed                     // answered with err: a matcher failed, or the client went away
)

// taken is one zone's admission of the request, kept to be undone.
type taken struct {
	z    *zone
	st   store.Store // the store that admitted it: the zone's, or its fallback
	key  string
	cost int64
	d    algorithms.Decision
}

// maxKeyLen is the longest key kept as is; a longer one (a header a client
// filled) is replaced by its hash, so that a key costs bounded memory in
// every store. The Redis store has a rule of its own for the key's escaped
// form in a key name (redisstore.MaxEscapedKey, 128 bytes): one rule for
// both would rename the Redis keys of every key of 129 to 256 bytes.
const maxKeyLen = 256

// decide decides the request in zone z: whether the zone applies (its
// matchers, its key), then the store's decision for the key and the
// request's cost (take, or takeOrWait with on_limit wait). With
// zoneAdmitted and zoneDenied, the decision is written to t (in place: a
// taken is large, and most requests are decided in one zone); err comes
// with zoneUnavailable and zoneFailed. down is take's: set once a store
// call of the request failed.
func (h *Handler) decide(r *http.Request, z *zone, down *bool, t *taken) (outcome, error) {
	rt := &h.rt
	ctx := r.Context()
	if len(z.matchers) > 0 {
		ok, err := z.matchers.AnyMatchWithError(r)
		if err != nil {
			return zoneFailed, err
		}
		if !ok {
			return zoneSkipped, nil
		}
	}

	key, err := z.resolver.Key(r)
	if err != nil {
		if c := rt.logger.Check(zapcore.DebugLevel, "resolving rate limit key"); c != nil {
			c.Write(zap.String("zone", z.name), zap.Error(err))
		}
		key = ""
	}
	if len(key) > maxKeyLen || hashedForm(key) {
		key = hashKey(key)
	}
	if key == "" {
		switch z.emptyKey {
		case emptyKeyAllow:
			return zoneSkipped, nil
		case emptyKeyDeny:
			*t = taken{z: z, key: key, d: z.emptyKeyDenial()}
			return zoneDenied, nil
		}
	}

	z = h.forRequest(z, r) // the request's own limits, if the zone takes them from it
	cost := z.costOf(r)
	var d algorithms.Decision
	var st store.Store
	if h.waits(z) {
		d, st, err = h.takeOrWait(ctx, z, key, cost, down)
	} else {
		d, st, err = h.take(ctx, z, key, cost, down)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			// The client went away (while waiting, or while the store
			// answered): nobody reads a response.
			return zoneFailed, caddyhttp.Error(statusClientClosed, err)
		case rt.onError == onErrorClosed && !rt.dryRun:
			return zoneUnavailable, err
		}
		// on_error open: this zone lets the request through.
		return zoneSkipped, nil
	}
	*t = taken{z: z, st: st, key: key, cost: cost, d: d}
	if !d.Allowed {
		return zoneDenied, nil
	}
	return zoneAdmitted, nil
}

// take decides zone z for key: one call to the zone's store. When the store
// fails (Redis down or slow), on_error local decides with the zone's memory
// fallback instead; with open and closed the error goes back to ServeHTTP,
// which lets the request through or answers 503.
//
// While the client's circuit breaker is open (on a Cluster, the one of the
// key's master) the store is not called at all: the request is decided by
// on_error at once. Nor is it once the same request has seen it fail
// (*down, set here, is the request's), whatever master its key is on: a
// request pays at most one Redis timeout, however many zones it goes
// through.
// Either way, what the instance holds still decides first (see heldTaker):
// only a request that needs Redis goes to on_error.
func (h *Handler) take(ctx context.Context, z *zone, key string, cost int64, down *bool) (algorithms.Decision, store.Store, error) {
	nd, never := z.neverAdmitted(cost)
	if never && z.blockFor == 0 {
		return nd, z.store, nil // no store call: its answer is known
	}
	// With block_for the store decides even such a request: a blocked
	// key's answer is its block's, and the denial blocks the key.
	var d algorithms.Decision
	err := errBreakerOpen
	if *down && z.breaker != nil {
		// Every zone with a breaker is on the handler's one client.
		err = errStoreDown
	} else if b := h.breakerFor(ctx, z, key); b.Allow() {
		start := time.Now()
		var at time.Time // zero: the store's clock (Redis TIME, a test's)
		if z.sharesClock {
			at = start // one clock reading for the memory store and the metric
		}
		if z.denies != nil {
			if d, ok := z.denies.Denied(key, start); ok {
				return d, z.store, nil // still denied: no need to ask Redis
			}
			d, err = z.denies.Ask(ctx, key, at, cost) // the cache was asked above
		} else {
			d, err = z.store.Take(ctx, key, at, cost)
		}
		z.m.observe(start)
		if err == nil {
			if b != nil { // the memory store's is nil: no call
				b.Record(nil)
			}
			return d, z.store, nil
		}
		if u, ok := errors.AsType[*store.Unsettled](err); ok {
			h.forgetLater(z, key, u) // a lease Redis may still take
		}
		if ctx.Err() != nil {
			// The client went away: not a failure of the store.
			return d, z.store, err
		}
		// A slot being moved refuses its own keys only, at once: neither
		// the master's breaker nor the request's later zones are affected
		// (see redisstore.SlotRefused).
		if !redisstore.SlotRefused(err) {
			*down = b != nil
			b.Record(err)
		}
		z.m.storeErrors.Inc()
		h.logStoreError(z, key, err)
	}
	if ht, ok := z.store.(heldTaker); ok {
		if d, ok := ht.TakeHeld(key, time.Time{}, cost); ok {
			return d, z.store, nil
		}
	}
	if never {
		return nd, z.store, nil
	}
	if z.fallback != nil {
		// on_error local decides: counted as what it decides (allowed or
		// denied), once; store_errors_total and breaker_open tell of
		// the failure.
		d, err = z.fallback.Take(ctx, key, time.Time{}, cost)
		return d, z.fallback, err
	}
	z.m.failed.Inc()
	return d, z.store, err
}

// breakerFor returns the circuit breaker of zone z's store for key: on a
// Redis Cluster the one of the master that holds key (a failed master
// sends only its own keys to on_error), else the zone's.
func (h *Handler) breakerFor(ctx context.Context, z *zone, key string) *breaker.Breaker {
	if z.redis == nil {
		return z.breaker
	}
	return z.redis.BreakerFor(ctx, key)
}

// heldTaker is a Redis store that can decide some requests from what this
// instance holds, without Redis: the leasing store from a lease (its units
// are charged in Redis already) and a denial it saw, the deny cache from a
// denial until its Retry-After. take asks it when it cannot ask Redis, in
// every on_error mode: those answers are Redis's own, and on_error is for
// the requests only Redis could decide.
type heldTaker interface {
	// TakeHeld decides a Take of key and cost at now (the store's clock
	// when zero) without calling Redis, and reports whether it could.
	TakeHeld(key string, now time.Time, cost int64) (algorithms.Decision, bool)
}

var (
	_ heldTaker = (*redisstore.LeaseStore)(nil)
	_ heldTaker = (*redisstore.DenyCache)(nil)
)

// errBreakerOpen is the error of a decision not asked of Redis because its
// circuit breaker is open.
var errBreakerOpen = errors.New("redis circuit breaker open (repeated failures): not called")

// errStoreDown is the error of a decision not asked of Redis because it
// failed earlier in the same request.
var errStoreDown = errors.New("redis failed earlier in this request: not called again")

// emptyKeyDenial is the decision of a zone with empty_key deny for a
// request without a key: it will never be admitted; come back after the
// longest window.
func (z *zone) emptyKeyDenial() algorithms.Decision {
	return algorithms.Decision{
		Limit:      z.tiers[0].Events,
		ResetAfter: z.maxWindow,
		RetryAfter: z.maxWindow,
	}
}

// hashKey replaces an overlong key by "#" and its hex SHA-256. A request's
// key of that form is hashed too (see hashedForm), so that no key a client
// sends is another's hashed key: colliding would need a SHA-256 preimage.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:])
}

// hashedForm reports whether key has the form of a hashed key: 65 bytes
// starting with "#". Such a key, as a client sent it, is hashed: the logs,
// the admin API and `caddy rate-limit get` show hashed keys, and a client
// that sent one would otherwise share the count of the long key behind it.
func hashedForm(key string) bool {
	return len(key) == 1+sha256.Size*2 && key[0] == '#'
}
