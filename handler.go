package ratelimit

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// statusClientClosed is the status of a request whose client went away
// while it waited (nginx's 499, as Caddy's reverse proxy uses it).
const statusClientClosed = 499

// leasePoll is how often a request waiting for a concurrency slot looks
// again.
const leasePoll = 50 * time.Millisecond

// ServeHTTP decides the request in every zone that applies, in order. A
// zone that denies it undoes what the zones before it admitted, and the
// request is rejected; otherwise it proceeds to next, and when next returns
// (or panics) the leases of concurrency zones are released and the
// admissions of count_status zones settled (see serveHeld).
//
// The decision is made by admit, which returns before next is called: its
// large frame (the admissions kept for undoing) is then off the stack that
// the rest of the handler chain runs on, which would otherwise grow (and be
// copied) on many requests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.rt.inflight != nil {
		h.rt.inflight.Add(1)
		defer h.rt.inflight.Add(-1)
	}
	held, done, err := h.admit(w, r)
	if done {
		return err
	}
	if held != nil {
		return h.serveHeld(w, r, next, held)
	}
	return next.ServeHTTP(w, r)
}

// admit decides the request in every zone, in order. It returns done with
// the error for ServeHTTP to return when the request was answered here
// (rejected, 503, the client gone); otherwise the request proceeds, and
// held are the admissions to settle when it ends, of concurrency and
// count_status zones (nil when none).
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) (held []taken, done bool, err error) {
	rt := &h.rt
	ctx := r.Context()

	var takesBuf [4]taken
	takes := takesBuf[:0] // the admissions, undone if a later zone denies
	var appliedBuf [4]*zone
	applied := appliedBuf[:0] // zones that decided, for RateLimit-Policy

	// The decision reported in the headers: the one with the fewest
	// remaining and, among those, the longest MoreAfter (rep, an index in
	// takes; a shorter one would make t early), or the first (dry-run)
	// denial (dry, when dryDenied).
	rep := -1
	var dry taken
	dryDenied := false

	var delay time.Duration
	hasHeld := false
	down := false // Redis failed: the later zones do not call it (see take)

	for _, z := range rt.zones {
		// Decided in place, in the next slot of takes; dropped from it
		// unless admitted.
		takes = append(takes, taken{})
		t := &takes[len(takes)-1]
		oc, err := h.decide(r, z, &down, t)
		if oc != zoneAdmitted {
			takes = takes[:len(takes)-1]
		}
		switch oc {
		case zoneSkipped:
			continue
		case zoneFailed:
			h.undoAll(ctx, takes, down)
			return nil, true, err
		case zoneUnavailable:
			h.undoAll(ctx, takes, down)
			return nil, true, h.unavailable(w, r, z, err)
		}
		z = t.z // under the request's own limits, if the zone takes them from it
		applied = append(applied, z)

		if oc == zoneDenied {
			if !rt.dryRun {
				h.undoAll(ctx, takes, down)
				return nil, true, h.reject(w, r, z, t.key, &t.d, h.policy(applied))
			}
			z.m.dryRun.Inc()
			h.logDenial(r, z, t.key, &t.d, true)
			if !dryDenied {
				// Off takes, whose slot the next zone decides in.
				dry, dryDenied = *t, true
			}
			continue
		}

		z.m.allowed.Inc()
		if z.lease || z.countStatus != nil {
			hasHeld = true
		}
		if z.shape && t.d.Delay > delay && !rt.dryRun {
			delay = t.d.Delay
		}
		if rep < 0 || t.d.Remaining < takes[rep].d.Remaining ||
			t.d.Remaining == takes[rep].d.Remaining && t.d.MoreAfter > takes[rep].d.MoreAfter {
			rep = len(takes) - 1
		}
	}

	if rep >= 0 || dryDenied {
		t := &dry
		if !dryDenied {
			t = &takes[rep]
		}
		var retry int64
		if !t.d.Allowed {
			retry = max(ceilSeconds(t.d.RetryAfter), 1)
		}
		vals := h.setPlaceholders(r, t.z, t.key, &t.d, retry, false)
		h.setHeaders(w.Header(), t.z, &t.d, h.policy(applied), 0, vals)
	}

	if delay > 0 {
		// leaky_bucket with on_limit wait: leave at the bucket's rate.
		if err := h.sleepFor(ctx, delay); err != nil {
			h.undoAll(ctx, takes, down)
			return nil, true, caddyhttp.Error(statusClientClosed, err)
		}
		h.releaseShaped(takes)
	}

	if hasHeld {
		// Off the stack: settled after next returns.
		held = make([]taken, 0, 1)
		for _, t := range takes {
			if t.z.lease || t.z.countStatus != nil {
				held = append(held, t)
			}
		}
	}
	return held, false, nil
}

// reject answers a denied request: Retry-After, the rate-limit headers and
// placeholders, then either an error for the site's handle_errors routes or
// the status written here.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, z *zone, key string, d *algorithms.Decision, policy []string) error {
	rt := &h.rt
	retry := retryAfterSeconds(d.RetryAfter, rt.jitter)
	vals := h.setPlaceholders(r, z, key, d, retry, true)
	h.setHeaders(w.Header(), z, d, policy, retry, vals)
	z.m.denied.Inc()
	h.logDenial(r, z, key, d, false)
	if rt.events != nil {
		h.emitExceeded(r, z, retry)
	}
	if h.useErrorRoutes(r) {
		return z.rejection(rt.status)
	}
	if rt.problemDetails {
		return z.writeProblem(w, rt.status, retry)
	}
	w.WriteHeader(rt.status)
	return nil
}

// useErrorRoutes reports whether a rejection should be returned as an
// error, for the site's handle_errors routes to render.
func (h *Handler) useErrorRoutes(r *http.Request) bool {
	ctx := r.Context()
	switch h.rt.errorRoutes {
	case errorRoutesNo:
		return false
	case errorRoutesUnknown:
		// First the server's routes: without them (the common case) the
		// longer look-up below, which finds nothing, is not needed.
		srv, _ := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
		if srv == nil || srv.Errors == nil || len(srv.Errors.Routes) == 0 {
			return false
		}
	}
	// Already in the error routes: an error now would not be rendered.
	return ctx.Value(caddyhttp.ErrorCtxKey) == nil
}

// logDenial logs a denial. By default at debug level, without the key: a
// limiter under attack must not write a line per request. With log_keys, at
// info level with the key and the client's address, as mholt/caddy-ratelimit
// logs a denial with log_key (same message and fields: zone, wait,
// remote_ip, key), for tools that ban clients from the log.
func (h *Handler) logDenial(r *http.Request, z *zone, key string, d *algorithms.Decision, dry bool) {
	msg := "rate limit exceeded"
	if dry {
		msg = "rate limit exceeded (dry run: not rejected)"
	}
	level := zapcore.DebugLevel
	if h.LogKeys {
		level = zapcore.InfoLevel
	}
	if c := h.rt.logger.Check(level, msg); c != nil {
		fields := []zap.Field{zap.String("zone", z.name),
			zap.Int("tier", d.Tier), zap.Int64("limit", d.Limit),
			zap.Duration("retry_after", d.RetryAfter)}
		if d.Blocked {
			fields = append(fields, zap.Bool("blocked", true))
		}
		if h.LogKeys {
			// Keys and addresses can be personal data: only when
			// asked for.
			remoteIP, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				remoteIP = r.RemoteAddr // a unix socket
			}
			fields = append(fields, zap.String("key", key),
				zap.Duration("wait", d.RetryAfter), zap.String("remote_ip", remoteIP))
		}
		c.Write(fields...)
	}
}

// policy is the RateLimit-Policy value for the zones that applied.
func (h *Handler) policy(applied []*zone) []string {
	switch len(applied) {
	case 0:
		return nil
	case 1:
		return applied[0].policyVals
	case len(h.rt.zones):
		if h.rt.policyAll != nil { // nil when a zone's limits vary per request
			return h.rt.policyAll
		}
	}
	items := make([]string, len(applied))
	for i, z := range applied {
		items[i] = z.policy
	}
	return []string{strings.Join(items, ", ")}
}

// undoAll gives back, latest first, what the zones admitted (and the
// places of shaped admissions); not to a Redis that failed earlier in the
// request (down).
func (h *Handler) undoAll(ctx context.Context, takes []taken, down bool) {
	if len(takes) == 0 {
		return
	}
	h.releaseShaped(takes)
	ctx = context.WithoutCancel(ctx)
	for i := len(takes) - 1; i >= 0; i-- {
		t := &takes[i]
		if skipUndo(t, down) {
			if t.z.lease {
				h.releaseLater(t) // a slot is not left taken for its window
			}
			continue
		}
		if err := t.st.Undo(ctx, t.key, time.Time{}, t.cost, t.d); err != nil {
			if t.z.lease {
				h.releaseFailed(t, err)
				continue
			}
			h.rt.logger.Debug("undoing a rate limit admission", zap.String("zone", t.z.name), zap.Error(err))
		}
	}
}

// now reads the handler's clock (see provisionOptions).
func (h *Handler) now() time.Time {
	if h.rt.opts.now != nil {
		return h.rt.opts.now()
	}
	return time.Now()
}

// sleepFor waits d, or until ctx is done (then returns its error), on the
// handler's clock.
func (h *Handler) sleepFor(ctx context.Context, d time.Duration) error {
	if h.rt.opts.sleep != nil {
		return h.rt.opts.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rejection is the error a rejection returns to the site's handle_errors
// routes: caddyhttp.Error's, but without the stack trace it records (a
// runtime.Callers walk and its formatting, for a debug log; a denial under
// attack is the common case, not a failure to trace). Without an Err, as
// mholt/caddy-ratelimit's: {err.message} is the status text, which error
// pages show to clients; the zone is in {http.rate_limit.exceeded.name}.
func (z *zone) rejection(status int) error {
	return caddyhttp.HandlerError{StatusCode: status, ID: errorID()}
}

// errorID is a random identifier of one error occurrence, for
// {http.error.id}, as caddyhttp.Error makes them: 9 characters of
// [0-9a-z].
func errorID() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [9]byte
	n := rand.Uint64()
	for i := range b {
		b[i] = chars[n%uint64(len(chars))]
		n /= uint64(len(chars))
	}
	return string(b[:])
}
