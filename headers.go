package ratelimit

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// The IETF headers follow draft-ietf-httpapi-ratelimit-headers-11:
//
//	RateLimit-Policy: "<name>";q=<events>[;qu="<unit>"];w=<seconds>, ...
//	RateLimit: "<name>";r=<remaining>;t=<seconds>
//
// with one policy per tier, named by policyNames, and t the effective
// window: the seconds within which the client can use no more than r
// (Decision.MoreAfter).

// Quota units of the qu parameter. The draft registers "requests" (the
// default, left out), "content-bytes" and "concurrent-requests"; a zone
// whose requests cost other than 1 unit counts in units of its own.
const (
	quConcurrent = "concurrent-requests"
	quUnits      = "units"
)

// policyNames names the tiers of zone name, distinctly: a single tier is
// the zone's name; several are "<zone>-<window>" (windowName), and a tier
// whose window an earlier one has too is "<zone>-<window>-<n>", n its
// position in the zone (from 1). Zone names are printable ASCII without
// quotes or backslashes, so a name is a valid sf-string as it is.
func policyNames(name string, tiers []algorithms.Tier) []string {
	if len(tiers) == 1 {
		return []string{name}
	}
	names := make([]string, len(tiers))
	seen := make(map[time.Duration]bool, len(tiers))
	for i, t := range tiers {
		names[i] = name + "-" + windowName(t.Window)
		if seen[t.Window] {
			names[i] += "-" + strconv.Itoa(i+1)
		}
		seen[t.Window] = true
	}
	return names
}

// windowName writes w in its largest unit that divides it (d, h, m, s, ms,
// us), as a Caddyfile would: 10s, 1h, 1500ms, 7d.
func windowName(w time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if w%u.d == 0 {
			return strconv.FormatInt(int64(w/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(w.Microseconds(), 10) + "us" // windows are whole µs
}

// quotaUnit is the qu of zone z's policies, "" for the default, requests.
func (z *zone) quotaUnit() string {
	switch {
	case z.costTmpl != "" || z.cost != 1:
		return quUnits // a concurrency zone's too: q counts units then
	case z.lease:
		return quConcurrent
	}
	return ""
}

// precomputeHeaders prepares the header values of a zone that do not
// change per request. The w of a policy is its window in whole seconds
// rounded up (the draft has no sub-second windows): a limit of 10 per
// 500ms says q=10;w=1, which never invites more than it admits.
func (z *zone) precomputeHeaders() {
	names := policyNames(z.name, z.tiers)
	if z.windowNamed && len(names) == 1 {
		names[0] += "-" + windowName(z.tiers[0].Window)
	}
	qu := ""
	if u := z.quotaUnit(); u != "" {
		qu = `;qu="` + u + `"`
	}
	items := make([]string, len(z.tiers))
	z.limitVals = make([]string, len(z.tiers))
	z.rlPrefixes = make([]string, len(z.tiers))
	for i, t := range z.tiers {
		w := max(ceilSeconds(t.Window), 1)
		items[i] = `"` + names[i] + `";q=` + strconv.FormatInt(t.Events, 10) + qu + ";w=" + strconv.FormatInt(w, 10)
		z.limitVals[i] = strconv.FormatInt(t.Events, 10)
		z.rlPrefixes[i] = `"` + names[i] + `";r=`
	}
	z.policy = strings.Join(items, ", ")
	z.policyVals = []string{z.policy}
}

// quotaSeconds is the t of the RateLimit header: the seconds, rounded up,
// until the reported tier admits more than its remaining units
// (MoreAfter), 0 when it is whole; for a denial at least the Retry-After
// (retryAfter, when the header is sent), so that the two agree.
func quotaSeconds(d *algorithms.Decision, retryAfter int64) int64 {
	t := ceilSeconds(d.MoreAfter)
	if !d.Allowed {
		t = max(t, retryAfter, ceilSeconds(d.RetryAfter), 1)
	}
	return t
}

// headerValues are one request's rate-limit header values, in the slots
// RateLimit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After,
// RateLimit-Policy and X-RateLimit-Limit.
type headerValues [6]string

// setHeaders writes the configured rate-limit headers for decision d of
// zone z, and Retry-After when retryAfter > 0; policy is the
// RateLimit-Policy value of the zones that applied. The per-request values
// are formatted into one string, whose parts vals holds (the request's
// placeholders carry the array, so that it costs no allocation of its own;
// nil: a new one). Every value slice has cap == len, so that a later
// Header.Add never writes into a shared array, and every slice is the
// request's own: Caddy's header handler replaces values in place
// (hdr[name][i] = ...), also after this handler (a deferred header), and
// a slice shared by every request would carry one request's edit to the
// next, racing.
func (h *Handler) setHeaders(hdr http.Header, z *zone, d *algorithms.Decision, policy []string, retryAfter int64, vals *headerValues) {
	mode := h.rt.headers
	if mode == headersOff && retryAfter <= 0 {
		return
	}
	if vals == nil {
		vals = new(headerValues)
	}
	// ends[i] is where value i (RateLimit, X-RateLimit-Remaining,
	// X-RateLimit-Reset, Retry-After) ends in b; it starts where the one
	// before it ends.
	var buf [160]byte
	var ends [4]int
	b := buf[:0]
	remaining := max(d.Remaining, 0)
	if mode&headersIETF != 0 {
		b = append(b, z.rlPrefixes[z.tierIndex(d)]...)
		b = strconv.AppendInt(b, remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, quotaSeconds(d, retryAfter), 10)
	}
	ends[0] = len(b)
	if mode&headersLegacy != 0 {
		b = strconv.AppendInt(b, remaining, 10)
	}
	ends[1] = len(b)
	if mode&headersLegacy != 0 {
		// X-RateLimit-Reset: seconds until the tier is whole again.
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	}
	ends[2] = len(b)
	if retryAfter > 0 {
		b = strconv.AppendInt(b, retryAfter, 10)
	}
	ends[3] = len(b)
	s := string(b) // the one allocation of the values
	// Only the values of the headers written are set: a rate_limit
	// handler earlier in the request shares vals, and its other headers
	// keep theirs.
	if retryAfter > 0 {
		vals[3] = s[ends[2]:ends[3]]
		hdr[hdrRetryAfter] = vals[3:4:4]
	}
	if mode&headersIETF != 0 {
		vals[0] = s[:ends[0]]
		if policy != nil {
			vals[4] = policy[0]
			hdr[hdrPolicy] = vals[4:5:5]
		}
		hdr[hdrRateLimit] = vals[0:1:1]
	}
	if mode&headersLegacy != 0 {
		if z.tierMatches(d) {
			vals[5] = z.limitVals[d.Tier]
		} else {
			vals[5] = strconv.FormatInt(d.Limit, 10)
		}
		hdr[hdrLimit] = vals[5:6:6]
		vals[1], vals[2] = s[ends[0]:ends[1]], s[ends[1]:ends[2]]
		hdr[hdrRemaining] = vals[1:2:2]
		hdr[hdrReset] = vals[2:3:3]
	}
}

// tierIndex is the tier d reports, the first if d names none.
func (z *zone) tierIndex(d *algorithms.Decision) int {
	if d.Tier >= 0 && d.Tier < len(z.tiers) {
		return d.Tier
	}
	return 0
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
// the rest of a decision. The provider also answers phState with the
// placeholders themselves, so that a later rate_limit handler (an inner
// route's) finds and updates them, and the placeholders describe the
// latest decision, as Set would.
type placeholders struct {
	z         *zone // the zone that decided
	key       string
	remaining int64
	limit     int64
	retry     int64
	exceeded  bool // a rejection: {http.rate_limit.exceeded.name} is set

	// hdrVals are the request's rate-limit header values (see
	// setHeaders), from the same arrays as the placeholders; nil until a
	// handler writes headers.
	hdrVals *headerValues
}

// phState is the replacer key of a request's *placeholders. One byte: no
// placeholder is that short, and the providers the replacer asks before
// ours (Caddy's) dismiss it on its length. Cheaper than keeping the
// placeholders in the request's vars: another walk up Caddy's request
// context, and a map insertion on every request.
const phState = "\x00"

// lookup is the provider the replacer calls for an unknown placeholder.
func (p *placeholders) lookup(key string) (any, bool) {
	switch key {
	case phZone:
		return p.z.name, true
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
			return p.z.name, true
		}
	case phState:
		return p, true
	}
	return nil, false
}

// placeholderBatch is how many requests' placeholders (and header values)
// are allocated at once (see newPlaceholders): 31 of 64 bytes and the
// 8-byte header of an object with pointers fill a 2 kB size class.
const placeholderBatch = 31

// placeholderBatches hands out the placeholders and header values of
// requests from arrays of placeholderBatch: one allocation for that many
// requests rather than one each. Nothing is reused: a request's
// placeholders live as long as its replacer (an access log reads them
// after the handler returns), and an array as long as any of its requests,
// which costs a long-lived request (a WebSocket) the arrays' 2 kB rather
// than its own 64 bytes. The arrays being cut are held in a sync.Pool, so
// that concurrent requests take from arrays of their own processor's
// rather than wait on one lock.
type placeholderBatches struct {
	pool sync.Pool // of *placeholderCursor
}

// placeholderCursor is what is left of the arrays one processor cuts.
type placeholderCursor struct {
	free []placeholders
	vals []headerValues
}

// newPlaceholders returns new placeholders for a request, with header
// values if withVals.
func (pb *placeholderBatches) newPlaceholders(withVals bool) *placeholders {
	if pb == nil { // an unprovisioned handler
		return &placeholders{hdrVals: new(headerValues)}
	}
	c := pb.cursor()
	if len(c.free) == 0 {
		c.free = make([]placeholders, placeholderBatch)
	}
	p := &c.free[0]
	c.free = c.free[1:]
	if withVals {
		p.hdrVals = c.newVals()
	}
	pb.pool.Put(c)
	return p
}

// newVals returns new header values for placeholders without (a handler
// with headers off decided the request first).
func (pb *placeholderBatches) newVals() *headerValues {
	if pb == nil {
		return new(headerValues)
	}
	c := pb.cursor()
	v := c.newVals()
	pb.pool.Put(c)
	return v
}

// cursor takes a cursor from the pool, a new one if it has none.
func (pb *placeholderBatches) cursor() *placeholderCursor {
	if c, _ := pb.pool.Get().(*placeholderCursor); c != nil {
		return c
	}
	return new(placeholderCursor)
}

// newVals cuts header values from c's array.
func (c *placeholderCursor) newVals() *headerValues {
	if len(c.vals) == 0 {
		c.vals = make([]headerValues, placeholderBatch)
	}
	v := &c.vals[0]
	c.vals = c.vals[1:]
	return v
}

// serverHandlers counts the rate_limit handlers provisioned in one HTTP
// server's routes (its error and named routes too; twice in a server with
// named routes, see provisionPlaceholders): a request passes through no
// others, so with one there is no earlier handler whose placeholders to
// look for.
type serverHandlers struct{ n atomic.Int32 }

// serverHandlersKey is the pool key of a server's serverHandlers.
type serverHandlersKey struct{ srv *caddyhttp.Server }

func (*serverHandlers) Destruct() error { return nil }

// provisionPlaceholders prepares the allocation of the requests'
// placeholders, and counts the handler among its server's (see
// serverHandlers); outside a server (nil handlers), every request looks
// for earlier placeholders. The count only grows: a handler cleaned up
// while its requests run still counts for them.
func (h *Handler) provisionPlaceholders(ctx caddy.Context) error {
	h.rt.placeholders = new(placeholderBatches)
	srv, _ := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil {
		return nil
	}
	key := serverHandlersKey{srv}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return new(serverHandlers), nil
	})
	if err != nil {
		return err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	h.rt.siblings = v.(*serverHandlers)
	n := int32(1)
	if len(srv.NamedRoutes) > 0 {
		// A named route's handler runs once per invoke of the route,
		// so maybe twice in a request: it must find its own
		// placeholders.
		n = 2
	}
	h.rt.siblings.n.Add(n)
	return nil
}

// setPlaceholders publishes decision d of zone z for key on the request's
// replacer (see placeholders); retryAfter > 0 marks a rejection. It
// returns the array for the request's header values, the placeholders'
// (nil without a replacer).
func (h *Handler) setPlaceholders(r *http.Request, z *zone, key string, d *algorithms.Decision, retryAfter int64, rejected bool) *headerValues {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		return nil
	}
	var p *placeholders
	if s := h.rt.siblings; s == nil || s.n.Load() > 1 {
		// Another rate_limit handler may have decided the request.
		v, _ := repl.Get(phState)
		p, _ = v.(*placeholders)
	}
	// The header values are needed unless setHeaders writes nothing.
	withVals := h.rt.headers != headersOff || retryAfter > 0
	if p == nil {
		p = h.rt.placeholders.newPlaceholders(withVals)
		repl.Map(p.lookup)
	} else if withVals && p.hdrVals == nil {
		p.hdrVals = h.rt.placeholders.newVals()
	}
	limit := d.Limit
	if z.tierMatches(d) {
		limit = z.tiers[d.Tier].Events
	}
	p.z = z
	p.key = key
	p.remaining = max(d.Remaining, 0)
	p.limit = limit
	p.retry = retryAfter
	p.exceeded = rejected
	return p.hdrVals
}
