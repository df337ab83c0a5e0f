package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/keyresolver/addr"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// Defaults filled in by Provision.
const (
	defaultStatus        = 429
	defaultCost          = "1"
	defaultSweepInterval = store.DefaultSweepInterval
	defaultMaxKeys       = store.DefaultMaxKeys // a flood of keys costs a zone tens of MB
	defaultIPv4Prefix    = addr.IPv4Bits        // each address alone
	defaultIPv6Prefix    = addr.IPv6Bits
)

// handlerRuntime is what Provision builds from the configuration: all that
// ServeHTTP reads, never written after Provision.
type handlerRuntime struct {
	zones  []*zone
	logger *zap.Logger

	headers headerMode
	status  int
	dryRun  bool
	jitter  float64

	// problemDetails: rejections written here have a problem+json body
	// (problem.go).
	problemDetails bool

	// errorRoutes says whether a rejection is returned as an error for the
	// site's handle_errors routes: errorRoutesUnknown means look at the
	// server in the request's context.
	errorRoutes errorRoutesMode

	// policyAll is the RateLimit-Policy value when every zone applies.
	policyAll []string

	// poolKeys are the pool entries this handler holds; Cleanup releases
	// them.
	poolKeys []any

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

	// releases retries the concurrency leases whose release failed (with
	// store redis only; see pendingReleases). A pointer, as inflight.
	releases *pendingReleases

	// leases are the admissions the requests in flight hold (with store
	// redis only), given back when the process exits (see
	// leasesInFlight). A pointer, as inflight.
	leases *leasesInFlight

	// placeholders allocates the requests' placeholders, and siblings
	// counts the rate_limit handlers of the handler's server (nil outside
	// one; see provisionPlaceholders). Pointers, as inflight.
	placeholders *placeholderBatches
	siblings     *serverHandlers

	// opts are the handler's clock and pool scope (see provisionOptions).
	opts provisionOptions
}

// provisionOptions are what provision takes from its caller rather than
// from the configuration. Provision passes the zero value: the real clock
// and the shared pool. Tests pass a synthetic clock, and a scope that keeps
// their zones' state to themselves.
type provisionOptions struct {
	// now is the clock of the memory stores, of sync_interval and of
	// on_limit wait; nil means time.Now.
	now func() time.Time

	// sleep waits d or until ctx is done (then returns its error), for
	// on_limit wait; nil means a timer.
	sleep func(ctx context.Context, d time.Duration) error

	// poolScope, when not empty, is part of the pool key of every store
	// of the handler's zones: they share no state with zones of another
	// scope (see storeKey).
	poolScope string

	// exiting reports whether the process is exiting; nil means
	// caddy.Exiting.
	exiting func() bool
}

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
	fallback store.Store        // on_error local: the memory store used while Redis fails
	breaker  *breaker.Breaker   // store redis: the client's; nil (always closed) otherwise
	redis    *redisstore.Client // store redis: the client (on a Cluster, a breaker per master)
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

	// blockFor is how long a key the zone denies is refused outright
	// (block_for); 0: not at all.
	blockFor time.Duration

	// maxCost is the most a request may cost and still be admitted some
	// day (see neverAdmitted); burst and algorithm are the zone's.
	maxCost   int64
	burst     int64
	algorithm string
	tiers     []algorithms.Tier

	// reqLimits, when a limit takes its events from the request, makes
	// the zone under each request's limits (limits.go); nil otherwise,
	// and in those zones.
	reqLimits *reqLimits

	// windowNamed: the RateLimit-Policy name of a single tier has its
	// window too (a zone under a window from the request).
	windowNamed bool

	// waiters, with on_limit wait, are the requests waiting, in line per
	// key (wait.go); nil otherwise.
	waiters *waitLines

	// Precomputed header material.
	policy     string   // RateLimit-Policy items of this zone
	policyVals []string // []string{policy}
	rlPrefixes []string // per tier: `"<policy name>";r=`
	limitVals  []string // per tier: events, formatted

	storeErrLog *logThrottle // store failures at warn at most every storeErrorLogEvery

	// countStatus, with count_status, are the statuses of the responses
	// the zone counts (countstatus.go); nil: every admitted request.
	countStatus []int

	// problem is the zone's problem+json body, with problem_details
	// (problem.go).
	problem problemBody
}

// Provision validates the configuration, fills in the defaults and sets up
// the zones: matchers, key resolvers, algorithms and stores.
func (h *Handler) Provision(ctx caddy.Context) error {
	return h.provision(ctx, provisionOptions{})
}

// provision is Provision with the clock and pool scope of opts.
func (h *Handler) provision(ctx caddy.Context, opts provisionOptions) error {
	h.rt.opts = opts
	h.rt.logger = ctx.Logger()
	if err := h.convertMholt(); err != nil {
		return err
	}
	if err := h.convertCaddyExt(caddyExtZone); err != nil {
		return err
	}
	if err := h.Validate(); err != nil {
		return err
	}

	h.Store = storeEnum.orDefault(h.Store)
	h.Headers = headersEnum.orDefault(h.Headers)
	orDefault(&h.Status, defaultStatus)
	orDefault(&h.SweepInterval, caddy.Duration(defaultSweepInterval))
	orDefault(&h.MaxKeys, defaultMaxKeys)
	h.rt.headers = headersEnum.mode(h.Headers)
	h.rt.status = h.Status
	h.rt.dryRun = h.DryRun
	h.rt.jitter = h.Jitter
	h.rt.problemDetails = h.ProblemDetails
	h.rt.errorRoutes = errorRoutesFor(ctx, h.rt.status)
	if err := h.provisionPlaceholders(ctx); err != nil {
		return err
	}
	var err error
	if h.rt.metrics, err = h.provisionMetrics(ctx); err != nil {
		return err
	}
	if err := h.provisionEvents(ctx); err != nil {
		return err
	}
	if h.onRedis() {
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
	static := true
	for _, zc := range h.Zones {
		z, err := h.provisionZone(ctx, zc, lz, place)
		if err != nil {
			return fmt.Errorf("zone %q: %v", zc.Name, err)
		}
		h.rt.zones = append(h.rt.zones, z)
		if lz != nil {
			lz.running.add(z, h.storeLabel())
		}
		policies = append(policies, z.policy)
		static = static && z.reqLimits == nil
	}
	if static {
		h.rt.policyAll = []string{strings.Join(policies, ", ")}
	}
	h.reportPendingReleases()
	return nil
}

// provisionZone fills in the defaults of zc and builds its runtime zone.
func (h *Handler) provisionZone(ctx caddy.Context, zc *Zone, lz *loadZones, place string) (*zone, error) {
	orDefault(&zc.Algorithm, algorithms.Default)
	orDefault(&zc.Cost, defaultCost)
	zc.OnLimit = onLimitEnum.orDefault(zc.OnLimit)
	zc.EmptyKey = emptyKeyEnum.orDefault(zc.EmptyKey)
	orDefault(&zc.IPv4Prefix, defaultIPv4Prefix)
	orDefault(&zc.IPv6Prefix, defaultIPv6Prefix)
	wait := onLimitEnum.mode(zc.OnLimit)
	if wait {
		orDefault(&zc.MaxWaiters, defaultMaxWaiters)
	}

	alg, err := algorithms.Lookup(zc.Algorithm)
	if err != nil {
		return nil, err
	}
	z := &zone{
		name:     zc.Name,
		wait:     wait,
		maxWait:  time.Duration(zc.MaxWait),
		lease:    alg.Lease,
		shape:    wait && alg.Delay,
		emptyKey: emptyKeyEnum.mode(zc.EmptyKey),
		blockFor: time.Duration(zc.BlockFor),
	}
	if len(zc.CountStatus) > 0 {
		z.countStatus = zc.CountStatus
	}
	if strings.Contains(zc.Cost, "{") {
		z.costTmpl = zc.Cost
	} else {
		z.cost, _ = strconv.ParseInt(zc.Cost, 10, 64) // Validate has checked it
	}

	// The identity of the zone's state, taken before LoadModule consumes
	// the raw module configurations.
	identity, storeID, err := h.storeIdentity(zc)
	if err != nil {
		return nil, err
	}
	if lz != nil {
		if h.Key != "" {
			// caddy-ext's key and rate in JSON (the Caddyfile's one-line
			// form arrives as a zone): the user did not write this name.
			place += " (RussellLuo/caddy-ext's key and rate, whose zone is named " + caddyExtZone + ")"
		}
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

	if zc.hasKeyResolver() {
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
		if ph, ok := keyresolver.UnsetPathSegment(zc.Key); ok {
			h.rt.logger.Warn("rate limit key has a path segment placeholder that is never set: Caddy numbers path segments from 0 ({http.request.uri.path.0}); an empty key is not limited unless empty_key says so",
				zap.String("zone", zc.Name), zap.String("placeholder", ph))
		}
	}

	h.lintPlaceholders(zc)
	h.lintWindows(zc)
	if i, j, ok := shadowedLimit(zc.Limits); ok {
		l, m := zc.Limits[i], zc.Limits[j]
		h.rt.logger.Warn("a limit never decides: another limit of the zone has its window and no more events",
			zap.String("zone", zc.Name),
			zap.String("limit", fmt.Sprintf("%d per %s", l.Events, time.Duration(l.Window))),
			zap.String("decided_by", fmt.Sprintf("%d per %s", m.Events, time.Duration(m.Window))))
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
	z.reqLimits = newReqLimits(zc)
	z.storeErrLog = new(logThrottle)

	if err := h.zoneStores(z, lim, storeKey{scope: h.rt.opts.poolScope, config: storeID}); err != nil {
		return nil, err
	}
	if z.wait {
		wc, err := h.pooledStore(z.name, storeKey{scope: h.rt.opts.poolScope, config: storeID + "\x00waiters"},
			func() (caddy.Destructor, error) { return new(waitCount), nil })
		if err != nil {
			return nil, err
		}
		z.waiters = newWaitLines(zc.MaxWaiters, &wc.(*waitCount).Int64)
	}

	z.m = h.rt.metrics.forZone(z.name, h.storeLabel())
	h.rt.metrics.zones.add(z)
	z.precomputeHeaders()
	if h.ProblemDetails {
		z.problem = newProblemBody(z.name, h.Status)
	}
	return z, nil
}

// orDefault sets *v to def when it is the zero value (not configured).
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// lintPlaceholders warns of each template of zc (its key, cost and limits)
// that names a request placeholder Caddy does not set: it has the same
// value for every request, so the zone keeps one count for everyone, or
// the default, where a per-request value was meant.
func (h *Handler) lintPlaceholders(zc *Zone) {
	type template struct{ option, tmpl string }
	templates := []template{{"key", zc.Key}, {"cost", zc.Cost}}
	for _, l := range zc.Limits {
		templates = append(templates, template{"limit", l.EventsPlaceholder}, template{"limit", l.WindowPlaceholder})
	}
	for _, t := range templates {
		if ph, ok := keyresolver.UnknownRequestPlaceholder(t.tmpl); ok {
			h.rt.logger.Warn("rate limit placeholder is not one Caddy sets (a typo?): it has the same value for every request",
				zap.String("zone", zc.Name), zap.String("option", t.option), zap.String("placeholder", ph))
		}
	}
}

// minConcurrencyLease is the shortest concurrency window that is not
// warned of: a request that runs longer than its lease loses its slot.
const minConcurrencyLease = time.Second

// lintWindows warns of windows that make a zone's limit hold less than it
// reads: a concurrency lease that ends before most requests do, and a
// sync_interval no shorter than a window (each instance may then admit
// the whole limit between two syncs).
func (h *Handler) lintWindows(zc *Zone) {
	for _, l := range zc.Limits {
		w := time.Duration(l.Window)
		if zc.Algorithm == algorithms.Concurrency && w < minConcurrencyLease {
			h.rt.logger.Warn("rate limit concurrency window is short: a request still in flight after it loses its slot, and is no longer counted",
				zap.String("zone", zc.Name), zap.Duration("window", w))
		}
		if s := time.Duration(h.SyncInterval); s >= w {
			h.rt.logger.Warn("rate limit sync_interval is not shorter than the window: each instance may admit the whole limit between two syncs",
				zap.String("zone", zc.Name), zap.Duration("sync_interval", s), zap.Duration("window", w))
		}
	}
}
