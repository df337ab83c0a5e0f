package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// Defaults filled in by Provision.
const (
	defaultStore         = "memory"
	defaultHeaders       = "both"
	defaultStatus        = 429
	defaultCost          = "1"
	defaultOnLimit       = "reject"
	defaultEmptyKey      = "global"
	defaultSweepInterval = time.Minute
	defaultMaxKeys       = store.DefaultMaxKeys // a flood of keys costs a zone tens of MB
	defaultIPv4Prefix    = 32
	defaultIPv6Prefix    = 128
)

// pool holds what outlives a config reload: the store of each zone (keyed
// by storeKey), the metrics' counters, and, while a config is loaded, the
// zones it defines (keyed by loadKey). It is the only package-level mutable
// state.
var pool = caddy.NewUsagePool()

// storeKey identifies a zone's store across handlers and config loads: a
// zone name is one limit in the whole config, so every handler naming it
// shares its store (its counts), in a site or in another, as they share its
// Redis keys with store redis.
//
// config is the zone's identity (see zoneIdentity): its name and every
// setting that gives its counts their meaning or says where they live, as
// JSON with the defaults filled in, plus a suffix for the stores a zone
// may have besides its main one (the on_error local fallback). A zone keeps
// its state across `caddy reload` when its identity is unchanged: the new
// config's handlers take the store before the old config's release it.
// Changing any of these settings starts the zone afresh, so a new limit
// applies at once. Settings that only change what is done with a decision
// (match, cost, on_limit, max_wait, empty_key, headers, status, dry_run,
// jitter, on_error) keep the counts, and may differ between the handlers
// that name the zone: e.g. leaving dry_run keeps what was counted in it.
//
// Two zones of one name whose identities differ in one config load are a
// configuration error (see loadZones.claim), so a name never means two
// limits.
type storeKey struct {
	config string
}

// loadKey is the pool key of the zones of one config load: Caddy gives
// each load a metrics registry of its own.
type loadKey struct {
	reg *prometheus.Registry
}

// loadZones is what the rate_limit handlers of one config load have
// defined so far: each zone name's identity and where it was first
// defined.
type loadZones struct {
	mu       sync.Mutex
	handlers int // handlers provisioned so far, to number them in errors
	zones    map[string]zoneDefinition
}

type zoneDefinition struct {
	identity string
	fields   map[string]json.RawMessage // identity by field, to name what differs
	place    string
}

func (*loadZones) Destruct() error { return nil }

// next numbers a handler of the load, from 1.
func (lz *loadZones) next() int {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	lz.handlers++
	return lz.handlers
}

// claim records that the zone name with identity is defined at place, or
// fails when the load already defines that name with another identity.
func (lz *loadZones) claim(name, identity, place string) error {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	def, ok := lz.zones[name]
	if !ok {
		lz.zones[name] = zoneDefinition{identity: identity, fields: identityFields(identity), place: place}
		return nil
	}
	if def.identity == identity {
		return nil
	}
	return fmt.Errorf("defined differently in %s and in %s (they differ in %s): "+
		"a zone name is one limit in the whole config, shared by every handler that names it, "+
		"so its limit settings must be the same everywhere; give one of them another name",
		def.place, place, strings.Join(differingFields(def.fields, identityFields(identity)), ", "))
}

// identityFields splits an identity's JSON by field.
func identityFields(identity string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(identity), &m); err != nil {
		return nil
	}
	return m
}

// differingFields names, sorted, the fields in which a and b differ.
func differingFields(a, b map[string]json.RawMessage) []string {
	var names []string
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			names = append(names, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		names = []string{"settings"}
	}
	return names
}

// handlerRuntime is what Provision builds from the configuration: all that
// ServeHTTP reads, never written after Provision.
type handlerRuntime struct {
	zones  []*zone
	logger *zap.Logger

	headers headerMode
	status  int
	dryRun  bool
	jitter  float64

	// errorRoutes says whether a rejection is returned as an error for the
	// site's handle_errors routes: errorRoutesUnknown means look at the
	// server in the request's context.
	errorRoutes errorRoutesMode

	// policyAll is the RateLimit-Policy value when every zone applies.
	policyAll []string

	// poolKeys are the pool entries this handler holds; Cleanup releases
	// them. private are stores outside the pool (tests with a clock).
	poolKeys []any
	private  []caddy.Destructor

	// redis is the shared Redis client of store redis (nil otherwise) and
	// redisConf its settings with placeholders replaced and defaults in.
	redis     *redisstore.Client
	redisConf *RedisConfig
	onError   onErrorMode

	metrics *metrics

	// events, when set, is the events app of the config, which has
	// subscribers to rate_limit_exceeded: each rejection emits it, with
	// eventCtx (the handler's provisioning context: the event's origin
	// is this module). nil when nobody listens.
	events   *caddyevents.App
	eventCtx caddy.Context

	// inflight counts the requests in ServeHTTP (with store redis only):
	// Cleanup runs when a reload starts to shut the old servers down,
	// while their requests still run, so the Redis client they use is
	// released only once they are done. A pointer: Handler is copied by
	// value (CaddyModule).
	inflight *atomic.Int64

	// clock, when set (tests), is the time source of the memory stores
	// and of on_limit wait; sleep, when set, replaces the real timer.
	clock func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

type errorRoutesMode uint8

const (
	errorRoutesUnknown errorRoutesMode = iota
	errorRoutesYes
	errorRoutesNo
)

type emptyKeyMode uint8

const (
	emptyKeyGlobal emptyKeyMode = iota
	emptyKeyAllow
	emptyKeyDeny
)

// zone is a provisioned Zone.
type zone struct {
	name     string
	matchers caddyhttp.MatcherSets
	resolver keyresolver.KeyResolver
	store    store.Store
	fallback store.Store      // on_error local: the memory store used while Redis fails
	breaker  *breaker.Breaker // store redis: the client's; nil (always closed) otherwise
	m        zoneMetrics

	// sharesClock: the store's clock is time.Now (memory store, real
	// clock), so the instant read for the latency metric is passed to it.
	sharesClock bool

	// denies, with store redis, answers a key denied again before its
	// Retry-After without a round trip (see redisstore.DenyCache); it is
	// then the zone's store too. nil when the zone's denials must reach
	// Redis.
	denies    *redisstore.DenyCache
	limiter   algorithms.Limiter
	cost      int64  // the static cost, when costTmpl is empty
	costTmpl  string // a placeholder cost
	emptyKey  emptyKeyMode
	wait      bool
	maxWait   time.Duration
	lease     bool // concurrency: the admission is released when the request ends
	shape     bool // leaky_bucket with wait: hold admitted requests for Decision.Delay
	maxWindow time.Duration

	// maxCost is the most a request may cost and still be admitted some
	// day (see neverAdmitted); burst and algorithm are the zone's.
	maxCost   int64
	burst     int64
	algorithm string
	tiers     []algorithms.Tier

	// waiters, with on_limit wait, are the requests waiting, in line per
	// key (wait.go); nil otherwise.
	waiters *waitLines

	// Precomputed header material.
	policy     string     // RateLimit-Policy items of this zone
	policyVals []string   // []string{policy}
	rlPrefix   string     // `"<name>";r=`
	limitVals  [][]string // per tier: []string{events}

	storeErrLog logThrottle // store failures at warn at most every storeErrorLogEvery
	rejectError error
}

// Provision validates the configuration, fills in the defaults and sets up
// the zones: matchers, key resolvers, algorithms and stores.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.rt.logger = ctx.Logger()
	if err := h.convertMholt(); err != nil {
		return err
	}
	if err := h.Validate(); err != nil {
		return err
	}

	if h.Store == "" {
		h.Store = defaultStore
	}
	if h.Headers == "" {
		h.Headers = defaultHeaders
	}
	if h.Status == 0 {
		h.Status = defaultStatus
	}
	if h.SweepInterval == 0 {
		h.SweepInterval = caddy.Duration(defaultSweepInterval)
	}
	if h.MaxKeys == 0 {
		h.MaxKeys = defaultMaxKeys
	}
	mode, err := parseHeaderMode(h.Headers)
	if err != nil {
		return err
	}
	h.rt.headers = mode
	h.rt.status = h.Status
	h.rt.dryRun = h.DryRun
	h.rt.jitter = h.Jitter
	h.rt.errorRoutes = errorRoutesFor(ctx)
	if h.rt.metrics, err = h.provisionMetrics(ctx); err != nil {
		return err
	}
	if err := h.provisionEvents(ctx); err != nil {
		return err
	}
	if h.Store == "redis" {
		if err := h.provisionRedis(); err != nil {
			return err
		}
	}

	lz, place, err := h.provisionLoad(ctx)
	if err != nil {
		return err
	}

	h.rt.zones = make([]*zone, 0, len(h.Zones))
	policies := make([]string, 0, len(h.Zones))
	for _, zc := range h.Zones {
		z, err := h.provisionZone(ctx, zc, lz, place)
		if err != nil {
			return fmt.Errorf("zone %q: %v", zc.Name, err)
		}
		h.rt.zones = append(h.rt.zones, z)
		policies = append(policies, z.policy)
	}
	h.rt.policyAll = []string{strings.Join(policies, ", ")}
	return nil
}

// provisionZone fills in the defaults of zc and builds its runtime zone.
func (h *Handler) provisionZone(ctx caddy.Context, zc *Zone, lz *loadZones, place string) (*zone, error) {
	if zc.Algorithm == "" {
		zc.Algorithm = algorithms.SlidingLog
	}
	if zc.Cost == "" {
		zc.Cost = defaultCost
	}
	if zc.OnLimit == "" {
		zc.OnLimit = defaultOnLimit
	}
	if zc.EmptyKey == "" {
		zc.EmptyKey = defaultEmptyKey
	}
	if zc.IPv4Prefix == 0 {
		zc.IPv4Prefix = defaultIPv4Prefix
	}
	if zc.IPv6Prefix == 0 {
		zc.IPv6Prefix = defaultIPv6Prefix
	}
	if zc.OnLimit == "wait" && zc.MaxWaiters == 0 {
		zc.MaxWaiters = defaultMaxWaiters
	}

	z := &zone{
		name:    zc.Name,
		wait:    zc.OnLimit == "wait",
		maxWait: time.Duration(zc.MaxWait),
		lease:   zc.Algorithm == algorithms.Concurrency,
	}
	z.shape = z.wait && zc.Algorithm == algorithms.LeakyBucket
	if z.wait {
		z.waiters = newWaitLines(zc.MaxWaiters)
	}
	switch zc.EmptyKey {
	case "global":
		z.emptyKey = emptyKeyGlobal
	case "allow":
		z.emptyKey = emptyKeyAllow
	case "deny":
		z.emptyKey = emptyKeyDeny
	default:
		return nil, fmt.Errorf("unknown empty_key value %q", zc.EmptyKey)
	}
	if strings.Contains(zc.Cost, "{") {
		z.costTmpl = zc.Cost
	} else {
		n, err := strconv.ParseInt(zc.Cost, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("cost must be a positive integer or a placeholder, got %q", zc.Cost)
		}
		z.cost = n
	}

	// The identity of the zone's state, taken before LoadModule consumes
	// the raw module configurations.
	identity, err := h.storeIdentity(zc)
	if err != nil {
		return nil, err
	}
	if lz != nil {
		if err := lz.claim(zc.Name, identity, place); err != nil {
			return nil, err
		}
	}

	if len(zc.MatcherSetsRaw) > 0 {
		v, err := ctx.LoadModule(zc, "MatcherSetsRaw")
		if err != nil {
			return nil, fmt.Errorf("loading matchers: %v", err)
		}
		if err := z.matchers.FromInterface(v); err != nil {
			return nil, err
		}
	}

	if len(zc.KeyResolverRaw) > 0 {
		raw := zc.KeyResolverRaw
		v, err := ctx.LoadModule(zc, "KeyResolverRaw")
		if err != nil {
			return nil, fmt.Errorf("loading key resolver: %v", err)
		}
		zc.KeyResolverRaw = raw // kept: Validate, which runs next, looks at it
		kr, ok := v.(keyresolver.KeyResolver)
		if !ok {
			return nil, fmt.Errorf("key resolver module %T does not implement keyresolver.KeyResolver", v)
		}
		z.resolver = kr
	} else {
		t, err := keyresolver.NewTemplate(zc.Key, zc.IPv4Prefix, zc.IPv6Prefix)
		if err != nil {
			return nil, err
		}
		z.resolver = t
	}

	cfg := algorithms.Config{Burst: zc.Burst, CountRejected: zc.CountRejected}
	for _, l := range zc.Limits {
		t := algorithms.Tier{Events: l.Events, Window: time.Duration(l.Window)}
		cfg.Tiers = append(cfg.Tiers, t)
		z.maxWindow = max(z.maxWindow, t.Window)
	}
	z.tiers = cfg.Tiers
	z.burst, z.algorithm = zc.Burst, zc.Algorithm
	z.setCapacity(cfg, zc.Algorithm)
	lim, err := algorithms.New(zc.Algorithm, cfg)
	if err != nil {
		return nil, err
	}
	z.limiter = lim

	if err := h.zoneStores(z, lim, storeKey{config: identity}); err != nil {
		return nil, err
	}

	z.m = h.rt.metrics.forZone(z.name, h.storeLabel())
	h.rt.metrics.zones.add(z)
	z.precomputeHeaders()
	z.rejectError = fmt.Errorf("rate limit exceeded in zone %q", z.name)
	return z, nil
}

// zoneIdentity is what gives a zone's counts their meaning and says where
// they live (see storeKey): the zone's limit settings and its handler's
// store settings, defaults filled in.
type zoneIdentity struct {
	Name          string          `json:"name"`
	Algorithm     string          `json:"algorithm"`
	Limits        []Limit         `json:"limits"`
	Burst         int64           `json:"burst"`
	CountRejected bool            `json:"count_rejected"`
	Key           string          `json:"key"`
	KeyResolver   json.RawMessage `json:"key_resolver,omitempty"`
	IPv4Prefix    int             `json:"ipv4_prefix"`
	IPv6Prefix    int             `json:"ipv6_prefix"`
	Store         string          `json:"store"`
	MaxKeys       int             `json:"max_keys"`
	SweepInterval caddy.Duration  `json:"sweep_interval"`
	Redis         *redisLocation  `json:"redis,omitempty"`
	SyncInterval  caddy.Duration  `json:"sync_interval,omitempty"`
}

// redisLocation is which Redis database and keys hold a zone's counts (the
// resolved settings that choose them): handlers whose clients differ only
// in how they connect (timeouts, pool size, TLS, credentials) share the
// counts.
type redisLocation struct {
	Addresses         []string `json:"addresses,omitempty"`
	URL               string   `json:"url,omitempty"`
	SentinelMaster    string   `json:"sentinel_master,omitempty"`
	SentinelAddresses []string `json:"sentinel_addresses,omitempty"`
	DB                int      `json:"db,omitempty"`
	KeyPrefix         string   `json:"key_prefix"`
}

// storeIdentity returns the JSON of zc's zoneIdentity.
func (h *Handler) storeIdentity(zc *Zone) (string, error) {
	id := zoneIdentity{
		Name: zc.Name, Algorithm: zc.Algorithm, Limits: zc.Limits, Burst: zc.Burst,
		CountRejected: zc.CountRejected, Key: zc.Key, KeyResolver: zc.KeyResolverRaw,
		IPv4Prefix: zc.IPv4Prefix, IPv6Prefix: zc.IPv6Prefix,
		Store: h.Store, MaxKeys: h.MaxKeys, SweepInterval: h.SweepInterval,
	}
	if rc := h.rt.redisConf; h.Store == "redis" && rc != nil {
		// Another Redis, key prefix or mode is another count.
		id.Redis = &redisLocation{
			Addresses: rc.Addresses, URL: rc.URL,
			SentinelMaster: rc.SentinelMaster, SentinelAddresses: rc.SentinelAddresses,
			DB: rc.DB, KeyPrefix: rc.KeyPrefix,
		}
		id.SyncInterval = h.SyncInterval
	}
	b, err := json.Marshal(id)
	return string(b), err
}

// provisionLoad takes the handler's share of its config load's zones (nil
// outside a config load: a bare context has no metrics registry) and
// describes where the handler is, for errors.
func (h *Handler) provisionLoad(ctx caddy.Context) (*loadZones, string, error) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil, "", nil
	}
	key := loadKey{reg}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return &loadZones{zones: make(map[string]zoneDefinition)}, nil
	})
	if err != nil {
		return nil, "", err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	lz := v.(*loadZones)
	return lz, placeOf(ctx, lz.next()), nil
}

// placeOf describes the n-th rate_limit handler of a config load: its
// order, its server (name and listen addresses) and its site (the matchers
// of the server's top-level route that holds it, e.g. a Caddyfile site's
// host matcher).
func placeOf(ctx caddy.Context, n int) string {
	place := fmt.Sprintf("rate_limit handler #%d", n)
	srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return place
	}
	place += fmt.Sprintf(" (server %q listening on %s", srv.Name(), strings.Join(srv.Listen, " "))
	if site := siteOf(srv.Routes); site != "" {
		place += ", site " + site
	}
	return place + ")"
}

// siteOf describes the matchers of the route of routes whose handlers are
// being provisioned: Caddy provisions the routes in order, and a route's
// HandlersRaw is consumed (and Handlers set) once all its handlers are
// provisioned, so it is the first route with raw handlers but no handlers
// yet. "" if there is none or it has no matchers.
func siteOf(routes caddyhttp.RouteList) string {
	for i := range routes {
		r := &routes[i]
		if r.Handlers != nil || len(r.HandlersRaw) == 0 {
			continue
		}
		var sets []string
		for _, set := range r.MatcherSets {
			var ms []string
			for _, m := range set {
				name := fmt.Sprintf("%T", m)
				if mod, ok := m.(caddy.Module); ok {
					name = mod.CaddyModule().ID.Name()
				}
				j, err := json.Marshal(m)
				if err != nil {
					j = []byte("?")
				}
				ms = append(ms, name+" "+string(j))
			}
			sets = append(sets, strings.Join(ms, " "))
		}
		return strings.Join(sets, " or ")
	}
	return ""
}

// errorRoutesFor tells, at provision time, whether an error returned by the
// handler reaches error routes: the errors routes of an enclosing subroute,
// or the server's handle_errors routes unless none of them can match this
// site's requests.
func errorRoutesFor(ctx caddy.Context) errorRoutesMode {
	for _, m := range ctx.Modules() {
		if sr, ok := m.(*caddyhttp.Subroute); ok && sr.Errors != nil && len(sr.Errors.Routes) > 0 {
			return errorRoutesYes
		}
	}
	srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return errorRoutesUnknown
	}
	if srv.Errors == nil || len(srv.Errors.Routes) == 0 {
		return errorRoutesNo
	}
	if errorRoutesMayMatch(srv) {
		return errorRoutesYes
	}
	return errorRoutesNo
}

// errorRoutesMayMatch reports whether one of the server's error routes may
// match a request of the site being provisioned. The Caddyfile gives a
// site's handle_errors routes the site's host matcher, so a site without
// handle_errors shares a server with sites that have some: their routes
// match other hosts, and a rejection here can be written directly, saving
// Caddy's error path. Anything but plain host lists on both sides (no
// wildcards, no placeholders) counts as a possible match.
func errorRoutesMayMatch(srv *caddyhttp.Server) bool {
	ours, ok := currentRouteHosts(srv.Routes)
	if !ok {
		return true
	}
	for i := range srv.Errors.Routes {
		theirs, ok := rawHosts(srv.Errors.Routes[i].MatcherSetsRaw)
		if !ok {
			return true
		}
		for _, h := range theirs {
			if _, dup := ours[strings.ToLower(h)]; dup {
				return true
			}
		}
	}
	return false
}

// currentRouteHosts returns the hosts of the top-level route being
// provisioned (see siteOf), when its matchers are host lists only.
func currentRouteHosts(routes caddyhttp.RouteList) (map[string]struct{}, bool) {
	for i := range routes {
		r := &routes[i]
		if r.Handlers != nil || len(r.HandlersRaw) == 0 {
			continue
		}
		if len(r.MatcherSets) == 0 {
			return nil, false
		}
		hosts := make(map[string]struct{})
		for _, set := range r.MatcherSets {
			if len(set) != 1 {
				return nil, false
			}
			mh, ok := set[0].(caddyhttp.MatchHost)
			if !ok {
				if p, isPtr := set[0].(*caddyhttp.MatchHost); isPtr && p != nil {
					mh, ok = *p, true
				}
			}
			if !ok || !plainHosts(mh) {
				return nil, false
			}
			for _, h := range mh {
				hosts[strings.ToLower(h)] = struct{}{}
			}
		}
		return hosts, true
	}
	return nil, false
}

// rawHosts returns the hosts of unprovisioned matcher sets that are host
// lists only.
func rawHosts(sets caddyhttp.RawMatcherSets) ([]string, bool) {
	if len(sets) == 0 {
		return nil, false // matches every request
	}
	var all []string
	for _, set := range sets {
		raw, ok := set["host"]
		if len(set) != 1 || !ok {
			return nil, false
		}
		var hosts []string
		if err := json.Unmarshal(raw, &hosts); err != nil || !plainHosts(hosts) {
			return nil, false
		}
		all = append(all, hosts...)
	}
	return all, true
}

// plainHosts reports whether hosts are literal names, matched only by
// themselves.
func plainHosts(hosts []string) bool {
	if len(hosts) == 0 {
		return false
	}
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, "*{}") {
			return false
		}
	}
	return true
}

// Cleanup releases the zones' state: a store no other config load uses is
// destroyed.
func (h *Handler) Cleanup() error {
	var errs []error
	if h.rt.metrics != nil {
		for _, z := range h.rt.zones {
			h.rt.metrics.zones.remove(z)
		}
	}
	// Stores before the Redis client they use (the two-layer store makes a
	// last push): private stores first, then the pool's (releasePoolKeys).
	for _, m := range slices.Backward(h.rt.private) {
		if err := m.Destruct(); err != nil {
			errs = append(errs, err)
		}
	}
	h.rt.private = nil
	keys := h.rt.poolKeys
	h.rt.poolKeys = nil
	if h.rt.inflight != nil && h.rt.inflight.Load() > 0 {
		go h.releaseWhenIdle(keys)
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, releasePoolKeys(keys))...)
}

// drainLimit bounds how long Cleanup's release waits for requests still
// in flight (a request held by on_limit wait, a slow upstream).
const drainLimit = 5 * time.Minute

// releaseWhenIdle releases keys once no request of the handler is in
// flight any more, or after drainLimit.
func (h *Handler) releaseWhenIdle(keys []any) {
	deadline := time.Now().Add(drainLimit)
	for h.rt.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := releasePoolKeys(keys); err != nil {
		h.rt.logger.Error("releasing rate limit state", zap.Error(err))
	}
}

// releasePoolKeys releases pool entries, latest first: a zone's store (the
// two-layer store makes a last push) before the Redis client it uses.
func releasePoolKeys(keys []any) error {
	var errs []error
	for _, k := range slices.Backward(keys) {
		if _, err := pool.Delete(k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
