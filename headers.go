package ratelimit

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// headerMode is the set of rate-limit headers written.
type headerMode uint8

const (
	headersIETF headerMode = 1 << iota
	headersLegacy
	headersOff  headerMode = 0
	headersBoth            = headersIETF | headersLegacy
)

// Header names in canonical form, so that they can be assigned to an
// http.Header directly.
const (
	hdrRetryAfter = "Retry-After"
	hdrPolicy     = "Ratelimit-Policy" // RateLimit-Policy
	hdrRateLimit  = "Ratelimit"        // RateLimit
	hdrLimit      = "X-Ratelimit-Limit"
	hdrRemaining  = "X-Ratelimit-Remaining"
	hdrReset      = "X-Ratelimit-Reset"
)

// Placeholders set on the request's replacer.
const (
	phZone       = "http.rate_limit.zone"
	phKey        = "http.rate_limit.key"
	phRemaining  = "http.rate_limit.remaining"
	phRetryAfter = "http.rate_limit.retry_after"
	phLimit      = "http.rate_limit.limit"
	// phExceeded is the placeholder mholt/caddy-ratelimit sets on a
	// rejection, kept for configs migrating from it.
	phExceeded = "http.rate_limit.exceeded.name"
)

// ceilSeconds returns d in whole seconds, rounded up; never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retryAfterSeconds is the Retry-After of a rejection that must wait d:
// rounded up, at least 1, plus up to jitter*d at random (never less).
func retryAfterSeconds(d time.Duration, jitter float64) int64 {
	if jitter > 0 && d > 0 {
		extra := rand.Float64() * jitter * float64(d)
		if extra < float64(math.MaxInt64-d) {
			d += time.Duration(extra)
		} else {
			d = math.MaxInt64 // a jitter far above 1: saturate, never wrap
		}
	}
	return max(ceilSeconds(d), 1)
}

// precomputeHeaders prepares the header values of a zone that do not
// change per request.
func (z *zone) precomputeHeaders() {
	items := make([]string, len(z.tiers))
	z.limitVals = make([][]string, len(z.tiers))
	for i, t := range z.tiers {
		w := ceilSeconds(t.Window)
		items[i] = `"` + z.name + `";q=` + strconv.FormatInt(t.Events, 10) + ";w=" + strconv.FormatInt(w, 10)
		z.limitVals[i] = []string{strconv.FormatInt(t.Events, 10)}
	}
	z.policy = strings.Join(items, ", ")
	z.policyVals = []string{z.policy}
	z.rlPrefix = `"` + z.name + `";r=`
}

// quotaSeconds is the t of the RateLimit header: for a denial, the seconds
// until a request would be admitted (more quota); otherwise until the tier
// is whole again.
func quotaSeconds(d *algorithms.Decision) int64 {
	if !d.Allowed {
		return max(ceilSeconds(d.RetryAfter), 1)
	}
	return ceilSeconds(d.ResetAfter)
}

// setHeaders writes the configured rate-limit headers for decision d of
// zone z, and Retry-After when retryAfter > 0; policy is the
// RateLimit-Policy value of the zones that applied. Every value slice has
// cap == len, so that a later Header.Add never writes into a shared array.
func (h *Handler) setHeaders(hdr http.Header, z *zone, d *algorithms.Decision, policy []string, retryAfter int64) {
	mode := h.rt.headers
	if mode == headersOff && retryAfter <= 0 {
		return
	}
	vals := make([]string, 4) // one allocation for every per-request value
	if retryAfter > 0 {
		vals[3] = strconv.FormatInt(retryAfter, 10)
		hdr[hdrRetryAfter] = vals[3:4:4]
	}
	if mode == headersOff {
		return
	}
	remaining := max(d.Remaining, 0)
	if mode&headersIETF != 0 {
		var buf [160]byte
		b := append(buf[:0], z.rlPrefix...)
		b = strconv.AppendInt(b, remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, quotaSeconds(d), 10)
		vals[0] = string(b)
		if policy != nil {
			hdr[hdrPolicy] = policy
		}
		hdr[hdrRateLimit] = vals[0:1:1]
	}
	if mode&headersLegacy != 0 {
		vals[1] = strconv.FormatInt(remaining, 10)
		// X-RateLimit-Reset: seconds until the tier is whole again.
		vals[2] = strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)
		if z.tierMatches(d) {
			hdr[hdrLimit] = z.limitVals[d.Tier]
		} else {
			hdr[hdrLimit] = []string{strconv.FormatInt(d.Limit, 10)}
		}
		hdr[hdrRemaining] = vals[1:2:2]
		hdr[hdrReset] = vals[2:3:3]
	}
}

// tierMatches reports whether d's Limit is the Events of its tier, so that
// the precomputed values of the tier apply.
func (z *zone) tierMatches(d *algorithms.Decision) bool {
	return d.Tier >= 0 && d.Tier < len(z.tiers) && z.tiers[d.Tier].Events == d.Limit
}

// placeholders are the values of the {http.rate_limit.*} placeholders of
// one request. They are published lazily: the request's replacer gets a
// provider that formats a value only when a placeholder is used (an access
// log, an error page), because setting five static values costs more than
// the rest of a decision. The request's vars hold the one placeholders of
// the request, so that a later rate_limit handler (an inner route's) updates
// it and the placeholders describe the latest decision, as Set would.
type placeholders struct {
	zone      string
	key       string
	remaining int64
	limit     int64
	retry     int64
	exceeded  bool // a rejection: {http.rate_limit.exceeded.name} is set
}

// varPlaceholders is the request vars key of a request's *placeholders.
const varPlaceholders = "\x00rate_limit.placeholders"

// lookup is the provider the replacer calls for an unknown placeholder.
func (p *placeholders) lookup(key string) (any, bool) {
	switch key {
	case phZone:
		return p.zone, true
	case phKey:
		return p.key, true
	case phRemaining:
		return p.remaining, true
	case phLimit:
		return p.limit, true
	case phRetryAfter:
		return p.retry, true
	case phExceeded:
		if p.exceeded {
			return p.zone, true
		}
	}
	return nil, false
}

// setPlaceholders publishes decision d of zone z for key on the request's
// replacer (see placeholders); retryAfter > 0 marks a rejection.
func setPlaceholders(r *http.Request, z *zone, key string, d *algorithms.Decision, retryAfter int64, rejected bool) {
	ctx := r.Context()
	repl, _ := ctx.Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return
	}
	vars, _ := ctx.Value(caddyhttp.VarsCtxKey).(map[string]any)
	p, _ := vars[varPlaceholders].(*placeholders)
	if p == nil {
		p = new(placeholders)
		if vars != nil {
			vars[varPlaceholders] = p
		}
		repl.Map(p.lookup)
	}
	limit := d.Limit
	if z.tierMatches(d) {
		limit = z.tiers[d.Tier].Events
	}
	*p = placeholders{
		zone:      z.name,
		key:       key,
		remaining: max(d.Remaining, 0),
		limit:     limit,
		retry:     retryAfter,
		exceeded:  rejected,
	}
}
