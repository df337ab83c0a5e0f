package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// count_status: a zone that counts a request only when its response has one
// of the zone's statuses (failed logins: 401, 403). The request is decided
// as usual, a Take of its cost, so a key over the limit is refused up front
// and concurrent requests of the key see the provisional count (the
// conservative choice: a burst of guesses cannot all pass while their
// responses are pending). Once the response is known, the admission is
// undone, as when a later zone denies, unless the status matches. The
// rate-limit headers, written before the response, show the provisional
// count.

// countsStatus reports whether zone z counts a response of status: always
// when the zone has no count_status.
func (z *zone) countsStatus(status int) bool {
	if z.countStatus == nil {
		return true
	}
	for _, c := range z.countStatus {
		if caddyhttp.StatusCodeMatches(status, c) {
			return true
		}
	}
	return false
}

// serveHeld runs next for a request whose admissions in held (see admit)
// are settled when it ends: the concurrency leases released, and the
// admissions of count_status zones undone unless the response's status
// matches. Only then is the response writer wrapped, to record the status.
func (h *Handler) serveHeld(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, held []taken) (err error) {
	counting, leasing := false, false
	for i := range held {
		counting = counting || held[i].z.countStatus != nil
		leasing = leasing || held[i].z.lease
	}
	if l := h.rt.leases; l != nil && leasing {
		l.add(held)
		defer l.remove(held)
	}
	if !counting {
		defer h.release(r.Context(), held)
		return next.ServeHTTP(w, r)
	}
	sw := &statusWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	returned := false
	defer func() {
		// A status written is what the client got; otherwise an error
		// (or a panic, which Caddy answers with 500) is answered by the
		// error routes with its status, and nothing at all is a 200.
		status := sw.status
		switch {
		case status != 0:
		case !returned:
			status = http.StatusInternalServerError
		case err != nil:
			status = errorStatus(err)
		default:
			status = http.StatusOK
		}
		h.settle(r.Context(), held, status)
	}()
	err = next.ServeHTTP(sw, r)
	returned = true
	return err
}

// errorStatus is the status of an error returned by a handler, as Caddy
// answers it: a HandlerError's, else 500.
func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// settle ends the admissions of a finished request whose response had
// status: leases are released (see releaseLease), and the admissions of
// count_status zones whose statuses it does not match are undone, but not
// to a Redis whose breaker is open: the call would only wait for its
// timeout.
func (h *Handler) settle(ctx context.Context, held []taken, status int) {
	var undoCtx context.Context // made only when something is given back
	for i := len(held) - 1; i >= 0; i-- {
		t := &held[i]
		if !t.z.lease && t.z.countsStatus(status) {
			continue
		}
		if undoCtx == nil {
			undoCtx = context.WithoutCancel(ctx)
		}
		if t.z.lease {
			h.releaseLease(undoCtx, t)
			continue
		}
		if t.st == t.z.store && !h.breakerFor(ctx, t.z, t.key).Allow() {
			continue
		}
		if err := t.st.Undo(undoCtx, t.key, time.Time{}, t.cost, t.d); err != nil {
			h.rt.logger.Debug("giving back a rate limit admission after the response", zap.String("zone", t.z.name), zap.Error(err))
		}
	}
}

// statusWriter records the status of a response. It keeps the optional
// interfaces of the writer it wraps: Push and ReadFrom (from
// ResponseWriterWrapper), Flush and Hijack, and Unwrap for
// http.ResponseController.
type statusWriter struct {
	caddyhttp.ResponseWriterWrapper
	status int // the final status written; 0 until then
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx but 101 are informational: the final status comes later.
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// wrote records the implicit 200 of a body written without WriteHeader.
func (w *statusWriter) wrote() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote()
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	w.wrote()
	return w.ResponseWriterWrapper.ReadFrom(r)
}

func (w *statusWriter) FlushError() error {
	w.wrote()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Flush() { _ = w.FlushError() }

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Bounds of a count_status code: a status, or a class (4 for 4xx), as
// Caddy's response matchers take them.
const (
	minStatusCode  = 100
	maxStatusCode  = 599
	maxStatusClass = 5
)

// validateCountStatus checks count_status: status codes or classes, and
// an algorithm whose admissions can be given back after the response.
func (z *Zone) validateCountStatus() error {
	for i, c := range z.CountStatus {
		if slices.Contains(z.CountStatus[:i], c) {
			name := strconv.Itoa(c)
			if c <= maxStatusClass {
				name += "xx"
			}
			return zoneErrf("count_status", "count_status: %s given twice", name)
		}
		if class := c / 100; c >= minStatusCode && slices.Contains(z.CountStatus, class) {
			return zoneErrf("count_status", "count_status: %d is in %dxx, given too", c, class)
		}
		if (c < 1 || c > maxStatusClass) && (c < minStatusCode || c > maxStatusCode) {
			return zoneErrf("count_status", "count_status: %d is not a status code (%d to %d) or class (1 to %d, as in 4xx)", c, minStatusCode, maxStatusCode, maxStatusClass)
		}
	}
	if alg, err := algorithms.Lookup(z.Algorithm); err == nil && alg.Lease && len(z.CountStatus) > 0 {
		return zoneErrf("count_status", "count_status does not apply to algorithm %s: a lease is given back when its request ends, whatever the status", z.Algorithm)
	}
	return nil
}

// parseCountStatus reads the Caddyfile arguments of count_status: codes
// such as 401, or classes such as 4xx (stored as 4).
func parseCountStatus(args []string) ([]int, error) {
	if len(args) == 0 {
		return nil, errors.New("count_status takes one or more status codes (e.g. count_status 401 403, or 4xx for a class)")
	}
	codes := make([]int, 0, len(args))
	for _, a := range args {
		v := a
		if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") {
			v = v[:1]
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("count_status: %q is not a status code (e.g. 401) or class (e.g. 4xx)", a)
		}
		codes = append(codes, n)
	}
	return codes, nil
}

// Interface guards.
var (
	_ http.Flusher  = (*statusWriter)(nil)
	_ http.Hijacker = (*statusWriter)(nil)
	_ io.ReaderFrom = (*statusWriter)(nil)
	_ http.Pusher   = (*statusWriter)(nil)
)
