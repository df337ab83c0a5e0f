// Package ratelimit is a Caddy HTTP handler that limits how often requests
// may pass, per zone and key, in memory or (across instances) in Redis.
package ratelimit

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Handler{})
	caddy.OnExit(releaseDrainingOnExit)
}

// Handler limits the rate of requests. Each request is sorted into the zones
// whose matchers it satisfies; each zone turns the request into a key and
// holds that key to all of the zone's limits (tiers) with its algorithm. A
// request is admitted only when every zone admits it; one denied by any zone
// consumes nothing in the others.
//
// Rejected requests get the configured status (429 by default), a
// Retry-After header and rate-limit headers; when the site has
// handle_errors routes the rejection is returned to them as an error with
// that status so they can render it.
type Handler struct {
	// Zones are the independent limits this handler enforces, in order.
	// Zone names must be unique within the handler.
	Zones []*Zone `json:"zones,omitempty"`

	// Store is where limit state lives: "memory" (the default: one
	// instance's own counts) or "redis" (one count shared by every Caddy
	// instance using the same Redis, decided by a Lua script in one round
	// trip; see Redis).
	Store string `json:"store,omitempty"`

	// Redis is how the redis store connects. Only with store redis; its
	// defaults (127.0.0.1:6379, short timeouts) apply when it is left out.
	Redis *RedisConfig `json:"redis,omitempty"`

	// SyncInterval, with store redis, turns on the two-layer mode: each
	// instance decides on local counts and pushes them to Redis (INCRBY)
	// once per interval, reading back the shared total. Far fewer Redis
	// calls; approximate: with N instances, a window admits at most
	// (N-1) x ceil(events x interval / window) units more than its events.
	// Only with algorithm fixed_window or sliding_window (nanoseconds in
	// JSON, or a duration string; at least 10ms). Not with on_error closed
	// or local: decisions never wait on Redis. Default: 0 (off: every
	// decision is exact, one Redis call).
	SyncInterval caddy.Duration `json:"sync_interval,omitempty"`

	// Lease, with store redis, turns on leasing: an instance takes a batch
	// of a busy key's units from Redis in one call and admits from it
	// locally until the batch is used or the lease ends, then gives back
	// what is left. Never more than the limit across instances; fewer
	// Redis calls the busier a key (a quiet key makes one per request). The
	// value is how long a lease lasts at most: for token_bucket and gcra
	// keep it well under burst / rate, since a bucket lends only what
	// would still be there at the lease's end. Only with algorithm
	// fixed_window, sliding_window, sliding_log, token_bucket or gcra, not
	// with count_rejected or sync_interval (nanoseconds in JSON, or a
	// duration string; at least 10ms). Default: 0 (off).
	Lease caddy.Duration `json:"lease,omitempty"`

	// OnError is what a request gets when the redis store fails (an error,
	// a timeout, or the circuit breaker open after repeated failures):
	// "open" (the default: let it through, unlimited by that zone),
	// "closed" (reject it with 503 Service Unavailable) or "local" (decide
	// with an in-memory store on this instance: each instance enforces the
	// limit on its own until Redis is back).
	OnError string `json:"on_error,omitempty"`

	// LogKeys writes the key of a request (an address, a tenant ID...) in
	// the log lines of denials and failures, and logs each denial at info
	// level ("rate limit exceeded", with the key and the client address, as
	// mholt/caddy-ratelimit's log_key does). Default: false (keys can be
	// personal data: denials are logged at debug level, without the key).
	LogKeys bool `json:"log_keys,omitempty"`

	// Headers chooses the rate-limit response headers written on every
	// response, allowed or denied: "ietf" (RateLimit-Policy and RateLimit,
	// draft-ietf-httpapi-ratelimit-headers-11), "legacy" (X-RateLimit-Limit,
	// X-RateLimit-Remaining, X-RateLimit-Reset), "both" (the default) or
	// "off". Retry-After is written on every rejection whatever this says.
	Headers string `json:"headers,omitempty"`

	// Status is the HTTP status code of a rejection, 400 to 599.
	// Default: 429.
	Status int `json:"status,omitempty"`

	// DryRun decides, counts, logs and sets headers, but never rejects.
	DryRun bool `json:"dry_run,omitempty"`

	// ProblemDetails gives the rejections the handler writes itself an
	// RFC 9457 body (Content-Type application/problem+json) of the
	// quota-exceeded problem type of the IETF rate-limit headers draft:
	// type, title, status, detail, and violated-policies (the
	// RateLimit-Policy name of the zone that refused). Rejections handed
	// to the site's handle_errors routes are theirs to render. Default:
	// false (an empty body).
	ProblemDetails bool `json:"problem_details,omitempty"`

	// Jitter adds a random fraction of up to this much of the wait to
	// Retry-After (0.2: up to 20% more; from 0 to 10), so
	// rejected clients do not all retry at the same instant. Retry-After is
	// never made shorter. Default: 0.
	Jitter float64 `json:"jitter,omitempty"`

	// SweepInterval is how often the memory store drops the state of keys
	// that have gone idle (nanoseconds in JSON, or a duration string; at
	// least 1s). With store redis only with on_error local. Default: 1m.
	SweepInterval caddy.Duration `json:"sweep_interval,omitempty"`

	// MaxKeys is the most keys the memory store holds per zone; beyond it
	// the least recently used key is evicted, so a flood of distinct keys
	// cannot exhaust memory. A key costs a running Caddy about 0.5-1.8 kB
	// of resident memory, by algorithm and key length (README). With store
	// redis only with on_error local or sync_interval. Default: 50000.
	MaxKeys int `json:"max_keys,omitempty"`

	// DisableMetrics keeps this handler's zones out of Caddy's metrics
	// (as mholt/caddy-ratelimit's option of that name): their decisions,
	// store errors, keys and breaker state are not reported. Default:
	// false.
	DisableMetrics bool `json:"disable_metrics,omitempty"`

	// RateLimits are zones in the shape of mholt/caddy-ratelimit's JSON,
	// keyed by zone name, so that its configs load unchanged: each becomes
	// a zone (sliding_log, one tier of max_events per window), after
	// Zones, in name order. Default: none.
	RateLimits map[string]*MholtRateLimit `json:"rate_limits,omitempty"`

	// Distributed is mholt/caddy-ratelimit's periodic state sharing. Not
	// supported: set (other than null), it fails the config with a message
	// pointing at store redis. Default: none.
	Distributed json.RawMessage `json:"distributed,omitempty"`

	// StorageRaw is mholt/caddy-ratelimit's storage for Distributed. Not
	// supported: set (other than null), it fails the config with a message
	// pointing at store redis. Default: none.
	StorageRaw json.RawMessage `json:"storage,omitempty"`

	// LogKey is mholt/caddy-ratelimit's name of LogKeys; either turns it
	// on. Default: false.
	LogKey bool `json:"log_key,omitempty"`

	// Key is RussellLuo/caddy-ext's key variable: with Rate, the
	// configuration of its rate_limit handler, taken so that its configs
	// load unchanged. Together they make one zone named "default" over a
	// sliding window (sliding_window) in which each value of Key (a
	// placeholder, in Caddy's form or caddy-ext's short one such as
	// {query.id}) may make Rate requests; a request whose key is empty is
	// not limited. Not with Zones or RateLimits. Default: none.
	Key string `json:"key,omitempty"`

	// Rate is caddy-ext's limit per key: "<n>r/s" (n requests per second)
	// or "<n>r/m" (per minute). Required with Key. Default: none.
	Rate string `json:"rate,omitempty"`

	// ZoneSize is caddy-ext's name of MaxKeys (with Key and Rate).
	// Default: MaxKeys' default.
	ZoneSize int `json:"zone_size,omitempty"`

	// RejectStatus is caddy-ext's name of Status (with Key and Rate), a
	// 4xx or 5xx code. Default: 429.
	RejectStatus int `json:"reject_status,omitempty"`

	rt handlerRuntime // set up by Provision (provision.go)
}

// Zone is one independent limit: which requests it counts, how a request
// becomes a key, and the tiers each key is held to.
type Zone struct {
	// Name identifies the zone in headers, placeholders, logs and metrics.
	// Required; unique within the handler; 1 to 128 printable ASCII
	// characters other than space, quotes, backslash and braces.
	Name string `json:"name"`

	// MatcherSetsRaw restricts the zone to the requests that match. Default:
	// every request the handler sees.
	MatcherSetsRaw caddyhttp.RawMatcherSets `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// Key is a placeholder template evaluated per request, e.g.
	// "{http.request.remote.host}" or
	// "{http.request.header.X-Org-Id}:{http.request.method}". Each distinct
	// value is limited on its own. A static key limits all matching
	// requests together, and so does no key (as in mholt/caddy-ratelimit).
	// Braces must be placeholders (escape a literal one as \{). Not with
	// KeyResolverRaw. Default: none.
	Key string `json:"key,omitempty"`

	// KeyResolverRaw is a module from the namespace
	// http.handlers.rate_limit.key_resolvers that turns a request into a
	// key, instead of the Key template.
	KeyResolverRaw json.RawMessage `json:"key_resolver,omitempty" caddy:"namespace=http.handlers.rate_limit.key_resolvers inline_key=resolver"`

	// Algorithm is one of sliding_log (the default: an exact rolling
	// window), sliding_window, fixed_window, token_bucket, leaky_bucket,
	// gcra or concurrency (requests in flight).
	Algorithm string `json:"algorithm,omitempty"`

	// Limits are the tiers every key is held to; all must admit a request.
	// At least one. For concurrency, exactly one: events is the most
	// requests in flight and window how long a lease lives at most.
	Limits []Limit `json:"limits,omitempty"`

	// Burst is the bucket capacity of token_bucket, leaky_bucket and gcra,
	// in units, applied to every tier. Default: each tier's events. Not
	// allowed with other algorithms.
	Burst int64 `json:"burst,omitempty"`

	// Cost is how many units a request consumes: a positive integer or a
	// placeholder that evaluates to one (e.g.
	// "{http.request.header.X-Cost}"). A placeholder that is empty or not a
	// positive integer counts as 1. Default: "1".
	Cost string `json:"cost,omitempty"`

	// OnLimit is what happens to a request over the limit: "reject" (the
	// default) or "wait": hold it until it is admitted, for at most MaxWait,
	// then reject it. With leaky_bucket, wait also spaces admitted requests
	// evenly (traffic shaping).
	OnLimit string `json:"on_limit,omitempty"`

	// MaxWait is the longest a request waits with on_limit wait
	// (nanoseconds in JSON, or a duration string), at least 1ms and at
	// most 1m. Required
	// with wait, not allowed otherwise.
	MaxWait caddy.Duration `json:"max_wait,omitempty"`

	// MaxWaiters is the most requests the zone holds waiting at once
	// with on_limit wait, over all its keys; a request denied while the
	// zone holds that many is rejected at once. The waiters of a key are
	// admitted in arrival order. Default: 1000. Only with on_limit wait.
	MaxWaiters int `json:"max_waiters,omitempty"`

	// CountRejected makes denied requests consume units too, so a client
	// that keeps hammering stays limited. Default: false (a denied request
	// consumes nothing).
	CountRejected bool `json:"count_rejected,omitempty"`

	// CountStatus makes the zone count only the requests whose response
	// has one of these status codes, e.g. [401, 403] to count failed
	// logins; a one-digit code stands for its class (4 for every 4xx). A
	// request is still refused at once while its key is over the limit;
	// an admitted one is counted provisionally (so concurrent requests see
	// it) and given back once the response is known, unless its status
	// matches. An error returned by a later handler counts as its status
	// (500 if it has none), a panic as 500. Not with algorithm
	// concurrency. Default: none (every admitted request counts).
	CountStatus []int `json:"count_status,omitempty"`

	// BlockFor is a penalty: a key the zone denies is refused outright for
	// this long from the denial (nanoseconds in JSON, or a duration
	// string; at least 1ms, at most 3650d, a whole number of
	// microseconds). While blocked, its requests to the zone are refused
	// without being counted, with a Retry-After of the time left; a
	// denial does not extend a block in place. With store redis the block
	// is shared by every instance. Not longer than max_wait with on_limit
	// wait. Default: none (a denied key is admitted as soon as its limit
	// allows).
	BlockFor caddy.Duration `json:"block_for,omitempty"`

	// IPv4Prefix groups IPv4 client addresses in the key by this many
	// leading bits (e.g. 24 counts a /24 as one client). Applies to key
	// values that are an IP address; only with a Key with placeholders. 0
	// means not set. Default: 32 (each address alone).
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`

	// IPv6Prefix groups IPv6 client addresses in the key by this many
	// leading bits (64 counts a /64, one customer's network, as one
	// client). 0 means not set. Default: 128 (each address alone).
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// EmptyKey is what a request whose key evaluates to the empty string
	// gets: "global" (the default: all such requests share one key),
	// "allow" (not limited by this zone) or "deny" (rejected). Only global
	// in a zone whose key has no placeholder (or no key).
	EmptyKey string `json:"empty_key,omitempty"`
}

// Limit is one tier of a zone: at most Events units per Window.
type Limit struct {
	// Events is how many units a key may consume per window; with
	// EventsPlaceholder, the default for a request whose placeholder has
	// no usable value. Required, positive, at most 2^50.
	Events int64 `json:"events"`

	// EventsPlaceholder takes the tier's events from the request: a
	// placeholder template (e.g. "{plan_limit}", set by a map directive
	// from the customer's plan) whose value, a positive integer, is the
	// events of the request's key for this request. A value that is empty
	// or not a positive integer counts as Events; one above MaxEvents
	// counts as MaxEvents, so a value a client can set never grants it
	// more than that. What a key has used carries over from one value to
	// the next. Not with sync_interval. Default: none (Events for every
	// request).
	EventsPlaceholder string `json:"events_placeholder,omitempty"`

	// MaxEvents is the most events EventsPlaceholder may give a request.
	// Required with EventsPlaceholder, not allowed without; at least
	// Events, at most 2^50.
	MaxEvents int64 `json:"max_events,omitempty"`

	// Window is the length of the window (nanoseconds in JSON, or a
	// duration string such as "1m"); with WindowPlaceholder, the default.
	// Required, at least 1ms, a whole number of microseconds.
	Window caddy.Duration `json:"window"`

	// WindowPlaceholder takes the tier's window from the request: a
	// placeholder template whose value, a duration such as "1h", is the
	// window of the request's key for this request. A value that is empty,
	// not a duration, or not a whole number of microseconds counts as
	// Window; one shorter than MinWindow counts as MinWindow (a shorter
	// window admits more), one longer than 3650d as 3650d. Not with
	// sync_interval. Default: none (Window for every request).
	WindowPlaceholder string `json:"window_placeholder,omitempty"`

	// MinWindow is the shortest window WindowPlaceholder may give a
	// request (nanoseconds in JSON, or a duration string). Required with
	// WindowPlaceholder, not allowed without; at least 1ms, at most
	// Window.
	MinWindow caddy.Duration `json:"min_window,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rate_limit",
		New: func() caddy.Module { return new(Handler) },
	}
}
