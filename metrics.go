package ratelimit

import (
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Prometheus metrics, in Caddy's registry (served by the admin endpoint's
// /metrics and the metrics handler). Labels are the zone name (bounded by
// the config), the result and the store: never a key, so a flood of
// distinct clients cannot grow the series.
//
//	caddy_http_rate_limit_requests_total{zone,result}   allowed | denied | dry_run | error
//	caddy_http_rate_limit_decision_seconds{store}       histogram: time to decide one zone
//	caddy_http_rate_limit_store_errors_total{zone}      failed Redis calls (errors and timeouts)
//	caddy_http_rate_limit_breaker_open{zone}            1 while the Redis circuit breaker is open
//	caddy_http_rate_limit_keys{zone}                    keys held in memory (memory store, on_error local fallback, lease, sync_interval)
//	caddy_http_rate_limit_pending_releases{zone}        concurrency leases waiting for Redis to take them back
const (
	metricsNamespace = "caddy"
	metricsSubsystem = "http_rate_limit"
)

// Results of a decision, as the "result" label.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultDryRun  = "dry_run" // denied, but let through by dry_run
	resultError   = "error"   // the store failed; on_error open or closed decided
)

// metrics are the collectors of one registry: Caddy makes a registry per
// config load, so each load registers the collectors in its own. They live
// in the reload pool, keyed by the registry, for the handlers of that load
// to share. The counters and the histogram are the same objects in every
// load (see counters), so that they keep counting across reloads; the
// gauges read the load's own zones.
type metrics struct {
	*counters
	zones *zoneCollector
}

func (*metrics) Destruct() error { return nil }

// metricsKey is the pool key of a registry's metrics.
type metricsKey struct{ reg *prometheus.Registry }

// counters are the collectors that accumulate. One set serves every config
// load while a rate_limit handler is loaded (the pool entry is taken by the
// handlers of a new config before the old config's release it), so that a
// reload does not start them from zero again, as Prometheus expects of a
// counter; they start from zero when a config without rate_limit has been
// loaded in between.
type counters struct {
	requests    *prometheus.CounterVec
	decision    *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	pending     *pendingCollector

	// zones counts, by zone name, the provisioned zones of every loaded
	// config that have series here: a zone's series are deleted when the
	// last config naming it is unloaded, so that renaming zones across
	// reloads does not grow the series without bound.
	mu    sync.Mutex
	zones map[string]int
}

func (*counters) Destruct() error { return nil }

// countersKey is the pool key of the counters.
type countersKey struct{}

// decisionBuckets span a memory decision (about a microsecond) to a slow
// Redis round trip, in seconds.
var decisionBuckets = []float64{.000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

func newCounters() *counters {
	return &counters{
		zones:   make(map[string]int),
		pending: newPendingCollector(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "requests_total",
			Help: "Requests decided by a rate limit zone, by result (allowed, denied, dry_run: denied but let through, error: the store failed and on_error open or closed decided; with on_error local, the fallback's decision counts as allowed or denied).",
		}, []string{"zone", "result"}),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name:    "decision_seconds",
			Help:    "Time to decide one zone for one request, by store.",
			Buckets: decisionBuckets,
		}, []string{"store"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "store_errors_total",
			Help: "Failed calls of a zone to Redis (errors and timeouts). Requests decided by on_error without a call, while the circuit breaker is open, are not counted here (see requests_total{result=\"error\"} and, with on_error local, breaker_open).",
		}, []string{"zone"}),
	}
}

// newMetrics registers c and a new zone collector in reg.
func newMetrics(reg *prometheus.Registry, c *counters) (*metrics, error) {
	m := &metrics{counters: c, zones: newZoneCollector()}
	for _, c := range []prometheus.Collector{m.requests, m.decision, m.storeErrors, m.pending, m.zones} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// zoneMetrics are one zone's series, resolved once at Provision so that a
// request only increments atomics.
type zoneMetrics struct {
	allowed, denied, dryRun, failed prometheus.Counter
	storeErrors                     prometheus.Counter
	decision                        prometheus.Observer
}

func (m *metrics) forZone(name, storeLabel string) zoneMetrics {
	m.mu.Lock()
	m.counters.zones[name]++
	m.mu.Unlock()
	return zoneMetrics{
		allowed:     m.requests.WithLabelValues(name, resultAllowed),
		denied:      m.requests.WithLabelValues(name, resultDenied),
		dryRun:      m.requests.WithLabelValues(name, resultDryRun),
		failed:      m.requests.WithLabelValues(name, resultError),
		storeErrors: m.storeErrors.WithLabelValues(name),
		decision:    m.decision.WithLabelValues(storeLabel),
	}
}

// dropZone is forZone's counterpart, when a zone is cleaned up: the last
// one of its name takes its series away.
func (m *metrics) dropZone(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counters.zones[name]--; m.counters.zones[name] > 0 {
		return
	}
	delete(m.counters.zones, name)
	for _, r := range []string{resultAllowed, resultDenied, resultDryRun, resultError} {
		m.requests.DeleteLabelValues(name, r)
	}
	m.storeErrors.DeleteLabelValues(name)
}

// observe records how long a decision that started at start took.
func (zm *zoneMetrics) observe(start time.Time) {
	zm.decision.Observe(time.Since(start).Seconds())
}

// provisionMetrics finds (or registers) the metrics of ctx's registry.
func (h *Handler) provisionMetrics(ctx caddy.Context) (*metrics, error) {
	if h.DisableMetrics {
		// Counters and a registry of this handler's own, which nothing
		// scrapes: the shared counters would carry its zones' series into
		// the registry of any other handler.
		return newMetrics(prometheus.NewRegistry(), newCounters())
	}
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		// A bare context (tests): a registry nothing scrapes.
		reg = prometheus.NewRegistry()
	}
	v, _, err := pool.LoadOrNew(countersKey{}, func() (caddy.Destructor, error) {
		return newCounters(), nil
	})
	if err != nil {
		return nil, err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, countersKey{})
	c := v.(*counters)
	key := metricsKey{reg}
	v, _, err = pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newMetrics(reg, c)
	})
	if err != nil {
		return nil, err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	return v.(*metrics), nil
}

// zoneCollector reports the gauges read from the zones at scrape time:
// keys held in memory and the breaker state. The handlers that name one
// zone share its stores: each store is counted once, so that a series is
// reported once, with the zone's keys.
type zoneCollector struct {
	keysDesc, breakerDesc *prometheus.Desc

	mu    sync.Mutex
	zones map[*zone]struct{}
}

func newZoneCollector() *zoneCollector {
	return &zoneCollector{
		keysDesc: prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "keys"),
			"Keys held in memory by a zone (memory store, the on_error local fallback, lease, sync_interval).", []string{"zone"}, nil),
		breakerDesc: prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "breaker_open"),
			"1 while a circuit breaker of a zone's Redis is open (Redis failing: on_error decides; on a Cluster, one master's), else 0.", []string{"zone"}, nil),
		zones: make(map[*zone]struct{}),
	}
}

func (c *zoneCollector) add(z *zone) {
	c.mu.Lock()
	c.zones[z] = struct{}{}
	c.mu.Unlock()
}

func (c *zoneCollector) remove(z *zone) {
	c.mu.Lock()
	delete(c.zones, z)
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *zoneCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keysDesc
	ch <- c.breakerDesc
}

// Collect implements prometheus.Collector.
func (c *zoneCollector) Collect(ch chan<- prometheus.Metric) {
	keys := make(map[string]float64)
	open := make(map[string]float64)
	seen := make(map[any]struct{})
	c.mu.Lock()
	for z := range c.zones {
		if n, ok := z.keysHeld(seen); ok {
			keys[z.name] += float64(n)
		}
		if z.breaker != nil {
			v := open[z.name]
			if z.redis.BreakerOpen() {
				v = 1
			}
			open[z.name] = v
		}
	}
	c.mu.Unlock()
	for name, n := range keys {
		ch <- prometheus.MustNewConstMetric(c.keysDesc, prometheus.GaugeValue, n, name)
	}
	for name, v := range open {
		ch <- prometheus.MustNewConstMetric(c.breakerDesc, prometheus.GaugeValue, v, name)
	}
}

// keysHeld is how many keys the zone holds in memory, if it has a memory
// store (or fallback), leaving out the stores in seen (counted already
// through another handler naming the zone), which it adds its own to.
func (z *zone) keysHeld(seen map[any]struct{}) (int, bool) {
	type lener interface{ Len() int }
	n, ok := 0, false
	for _, s := range []any{z.store, z.fallback} {
		if l, is := s.(lener); is {
			ok = true
			if _, dup := seen[s]; dup {
				continue
			}
			seen[s] = struct{}{}
			n += l.Len()
		}
	}
	return n, ok
}

// pendingCollector reports the releases that wait for a retry (see
// pendingReleases), by zone, from the queues of the handlers that have
// one: those of a config a reload unloaded too, as long as they drain, so
// one collector serves every load, as the counters do. A zone that can
// queue releases (a concurrency zone on Redis) reports 0 when none waits.
type pendingCollector struct {
	desc *prometheus.Desc

	mu     sync.Mutex
	queues map[*pendingReleases][]string // the names of the queue's zones
}

func newPendingCollector() *pendingCollector {
	return &pendingCollector{
		desc: prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "pending_releases"),
			"Concurrency leases waiting to be given back to Redis: their release (or the forget of a take that timed out) failed and is retried until Redis answers or the lease expires.", []string{"zone"}, nil),
		queues: make(map[*pendingReleases][]string),
	}
}

// add reports p's releases, for zones (reported at 0 when none waits).
func (c *pendingCollector) add(p *pendingReleases, zones []string) {
	c.mu.Lock()
	c.queues[p] = zones
	c.mu.Unlock()
}

// remove stops reporting p's releases. A nil c does nothing.
func (c *pendingCollector) remove(p *pendingReleases) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.queues, p)
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	n := make(map[string]float64)
	c.mu.Lock()
	for p, zones := range c.queues {
		for _, z := range zones {
			n[z] += 0
		}
		p.countByZone(n)
	}
	c.mu.Unlock()
	for name, v := range n {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, name)
	}
}

// Interface guards.
var (
	_ prometheus.Collector = (*zoneCollector)(nil)
	_ prometheus.Collector = (*pendingCollector)(nil)
)

// storeLabel is the "store" label of the handler's decisions.
func (h *Handler) storeLabel() string {
	if h.onRedis() && h.SyncInterval > 0 {
		return "redis_sync"
	}
	return h.Store
}
