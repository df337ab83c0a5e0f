package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// Limits from the request: a limit whose events come from a placeholder
// (Limit.EventsPlaceholder) holds each request's key to the events its
// placeholder gives, within the limit's ceiling. The zone's store decides
// the key under those limits (store.Relimitable), so that what the key
// used under one value counts under the next.

// maxReqLimits bounds the sets of per-request limits a zone keeps ready
// (their Limiter, stores and headers); the sets beyond it are built for
// each request that needs one, so that a flood of distinct values costs
// time, not memory.
const maxReqLimits = 64

// reqLimits is what a zone with limits from placeholders needs per request.
type reqLimits struct {
	tmpls  []string        // per tier: the events placeholder, or "" (the tier's own events)
	max    []int64         // per tier: the ceiling of the events placeholder's value
	wtmpls []string        // per tier: the window placeholder, or ""
	minW   []time.Duration // per tier: the floor of the window placeholder's value

	mu    sync.Mutex
	zones map[string]*zone // the zone under each set of events, by eventsKey
}

// limitsFromRequest reports whether one of z's limits takes its events
// from the request.
func (z *Zone) limitsFromRequest() bool {
	for _, l := range z.Limits {
		if l.EventsPlaceholder != "" || l.WindowPlaceholder != "" {
			return true
		}
	}
	return false
}

// newReqLimits returns the reqLimits of zc, nil when its limits are all
// static.
func newReqLimits(zc *Zone) *reqLimits {
	if !zc.limitsFromRequest() {
		return nil
	}
	rl := &reqLimits{zones: make(map[string]*zone)}
	for _, l := range zc.Limits {
		rl.tmpls = append(rl.tmpls, l.EventsPlaceholder)
		rl.max = append(rl.max, l.MaxEvents)
		rl.wtmpls = append(rl.wtmpls, l.WindowPlaceholder)
		rl.minW = append(rl.minW, time.Duration(l.MinWindow))
	}
	return rl
}

// forRequest returns the zone that decides r: z itself when its limits are
// static or r's placeholders give their defaults, else z under r's
// limits.
func (h *Handler) forRequest(z *zone, r *http.Request) *zone {
	rl := z.reqLimits
	if rl == nil {
		return z
	}
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return z
	}
	tiers := make([]algorithms.Tier, len(z.tiers))
	same := true
	for i, t := range z.tiers {
		tiers[i] = t
		if tmpl := rl.tmpls[i]; tmpl != "" {
			if n, ok := placeholderCount(repl.ReplaceAll(tmpl, "")); ok {
				tiers[i].Events = min(n, rl.max[i])
			}
		}
		if tmpl := rl.wtmpls[i]; tmpl != "" {
			w, err := caddy.ParseDuration(strings.TrimSpace(repl.ReplaceAll(tmpl, "")))
			if err == nil && w > 0 && w%time.Microsecond == 0 {
				tiers[i].Window = min(max(w, rl.minW[i]), algorithms.MaxWindow)
			}
		}
		same = same && tiers[i] == t
	}
	if same {
		return z
	}
	key := tiersKey(tiers)
	rl.mu.Lock()
	c := rl.zones[key]
	rl.mu.Unlock()
	if c != nil {
		return c
	}
	c, err := z.under(tiers)
	if err != nil {
		// Limits that an algorithm cannot compute (a bucket whose
		// numbers would pass 2^50): the defaults decide.
		if ce := h.rt.logger.Check(zapcore.DebugLevel, "limit from the request refused: the zone's default applies"); ce != nil {
			ce.Write(zap.String("zone", z.name), zap.String("limits", key), zap.Error(err))
		}
		return z
	}
	rl.mu.Lock()
	if len(rl.zones) < maxReqLimits {
		rl.zones[key] = c
	}
	rl.mu.Unlock()
	return c
}

// tiersKey names a set of tiers: "<events>/<window µs> ...".
func tiersKey(tiers []algorithms.Tier) string {
	b := make([]byte, 0, 16*len(tiers))
	for _, t := range tiers {
		b = strconv.AppendInt(b, t.Events, 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, t.Window.Microseconds(), 10)
		b = append(b, ' ')
	}
	return string(b)
}

// under returns a copy of z deciding under tiers (z's, with other events
// and windows): its Limiter, stores (over the same keys), capacity and
// headers.
func (z *zone) under(tiers []algorithms.Tier) (*zone, error) {
	cfg := z.limiter.Config()
	cfg.Tiers = tiers
	lim, err := algorithms.New(z.algorithm, cfg)
	if err != nil {
		return nil, err
	}
	c := *z
	c.reqLimits = nil
	c.limiter, c.tiers = lim, tiers
	c.maxWindow = 0
	for i, t := range tiers {
		c.maxWindow = max(c.maxWindow, t.Window)
		// A single tier's policy is named by its window when that is
		// the request's own, so that plans of other windows differ.
		c.windowNamed = c.windowNamed || t.Window != z.tiers[i].Window
	}
	if c.store, err = storeUnder(z.store, lim); err != nil {
		return nil, err
	}
	if z.fallback != nil {
		if c.fallback, err = storeUnder(z.fallback, lim); err != nil {
			return nil, err
		}
	}
	c.setCapacity(cfg, z.algorithm)
	c.precomputeHeaders()
	return &c, nil
}

// storeUnder returns st deciding under lim.
func storeUnder(st store.Store, lim algorithms.Limiter) (store.Store, error) {
	rs, ok := st.(store.Relimitable)
	if !ok {
		return nil, fmt.Errorf("store %T cannot decide under limits from the request", st)
	}
	return rs.Under(lim)
}

// shadowedLimit finds a limit that can never decide: one whose window
// another limit of the zone has too, with no more events (or the same
// limit written twice: the later one). Every algorithm then refuses at the
// other limit first. Limits from placeholders vary per request and are
// passed over. It returns the indexes of the shadowed limit and of the
// one that shadows it. Provision warns of it rather than Validate refusing
// it: such configs loaded before, and decide as written.
func shadowedLimit(ls []Limit) (shadowed, by int, ok bool) {
	for i, l := range ls {
		for j, m := range ls {
			if i == j || l.EventsPlaceholder != "" || m.EventsPlaceholder != "" ||
				l.WindowPlaceholder != "" || m.WindowPlaceholder != "" || l.Window != m.Window {
				continue
			}
			if l.Events > m.Events || (l.Events == m.Events && i > j) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}
