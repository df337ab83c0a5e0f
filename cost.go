package ratelimit

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// A request's cost (a placeholder cost comes from the client) can exceed
// what a tier could ever admit: its events, or the bucket's burst. No wait
// makes such a request pass, so the zone refuses it without asking the
// store, whose answer is known; that also keeps a client-chosen cost from
// costing the store (a shared Redis above all) any work.

// setCapacity records the most units a request may cost in z and still be
// admitted some day: the smallest tier capacity. With count_rejected a
// denial consumes, so the store must see every request: no limit then.
func (z *zone) setCapacity(cfg algorithms.Config, algorithm string) {
	z.maxCost = math.MaxInt64
	if cfg.CountRejected {
		return
	}
	for _, t := range cfg.Tiers {
		z.maxCost = min(z.maxCost, algorithms.Capacity(t.Events, cfg.Burst, algorithm))
	}
}

// neverAdmitted returns the denial of a request of cost that z can never
// admit, and true; false when cost may be admitted some day. The denial
// names the tier the request exceeds (the one with the longest window if
// several), with no units remaining for it and, as the stores answer such
// a request, its window as Retry-After and reset.
func (z *zone) neverAdmitted(cost int64) (algorithms.Decision, bool) {
	if cost <= z.maxCost {
		// Small enough to be inlined: every decision asks.
		return algorithms.Decision{}, false
	}
	return z.neverDenial(cost), true
}

// neverDenial is neverAdmitted's denial of cost, above z.maxCost.
func (z *zone) neverDenial(cost int64) algorithms.Decision {
	d := algorithms.Decision{Tier: -1}
	for i, t := range z.tiers {
		c := algorithms.Capacity(t.Events, z.burst, z.algorithm)
		if cost > c && (d.Tier < 0 || t.Window > d.RetryAfter) {
			d = algorithms.Decision{Tier: i, Limit: c, ResetAfter: t.Window, RetryAfter: t.Window}
		}
	}
	return d
}

// costOf is the cost of the request in zone z: the static cost, or the
// placeholder's value when it is a positive integer, else 1.
func (z *zone) costOf(r *http.Request) int64 {
	if z.costTmpl == "" {
		return z.cost
	}
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return 1
	}
	n, ok := placeholderCount(repl.ReplaceAll(z.costTmpl, ""))
	if !ok {
		return 1
	}
	return n
}

// placeholderCount is a placeholder's value as a count (a cost, a limit's
// events): a positive decimal integer, and true. One too large for an
// int64 counts as the largest: a client's 30-digit cost is too much to
// admit, not the 1 of a value that is no number.
func placeholderCount(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return n, n > 0 // ParseInt saturates out of range, keeping the sign
}
