package ratelimit

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// onErrorMode is what a request gets when the redis store fails.
type onErrorMode uint8

const (
	onErrorOpen   onErrorMode = iota // let it through
	onErrorClosed                    // 503
	onErrorLocal                     // decide with the zone's memory fallback
)

// newRedisClient connects (lazily) with opts; its breaker's probe writes
// under keyPrefix, and the breaker is logged to logger (see breakerLog).
func newRedisClient(opts *redis.UniversalOptions, keyPrefix string, logger *zap.Logger) *redisstore.Client {
	useGoRedisLogger()
	bl := &breakerLog{logger: logger, addrs: opts.Addrs}
	return redisstore.NewClient(opts, redisstore.ClientOptions{
		KeyPrefix:       keyPrefix,
		OnBreakerChange: bl.change,
		OnProbeFailure:  bl.probeFailed,
	})
}

// breakerLog logs a Redis client's circuit breakers (one, or on a Cluster
// one per master, named by the line's "master"): once when one opens, with
// the cause and a hint; again while it stays open only when a probe fails
// for another reason (an operator who fixed the first cause, say started
// Redis again, would otherwise not learn of the next, such as a Redis out
// of memory), such lines at most once per breakerCauseEvery for all the
// breakers together; once when it closes.
type breakerLog struct {
	logger *zap.Logger
	addrs  []string

	mu     sync.Mutex
	reason map[string]string // per open breaker: redisHint of the cause last logged
	at     time.Time         // when a change of cause was last logged
}

// breakerCauseEvery bounds how often a breaker's change of cause is
// logged, should the cause go back and forth.
const breakerCauseEvery = 10 * time.Second

func (bl *breakerLog) change(master string, open bool, err error) {
	bl.mu.Lock()
	if open {
		if bl.reason == nil {
			bl.reason = make(map[string]string)
		}
		bl.reason[master] = redisstore.Hint(err)
	} else {
		delete(bl.reason, master)
	}
	bl.mu.Unlock()
	if !open {
		bl.logger.Info("Redis works again: circuit breaker closed", bl.where(master)...)
		return
	}
	bl.logger.Warn("Redis failing: circuit breaker open, requests decided by on_error until Redis runs the rate limit scripts again", bl.fields(master, err)...)
}

func (bl *breakerLog) probeFailed(master string, err error) {
	reason := redisstore.Hint(err)
	bl.mu.Lock()
	now := time.Now()
	last, open := bl.reason[master]
	log := open && reason != last && now.Sub(bl.at) >= breakerCauseEvery
	if log {
		bl.reason[master], bl.at = reason, now
	}
	bl.mu.Unlock()
	if log {
		bl.logger.Warn("Redis still failing, now for another reason: circuit breaker stays open", bl.fields(master, err)...)
	}
}

// where names the breaker's Redis: the configured addresses and, on a
// Cluster, the master whose keys it stands for (only those go to on_error).
func (bl *breakerLog) where(master string) []zap.Field {
	fields := []zap.Field{zap.Strings("addresses", bl.addrs)}
	if master != "" {
		fields = append(fields, zap.String("master", master))
	}
	return fields
}

func (bl *breakerLog) fields(master string, err error) []zap.Field {
	fields := append(bl.where(master), zap.Error(err))
	if hint := redisstore.Hint(err); hint != "" {
		fields = append(fields, zap.String("hint", hint))
	}
	return fields
}

// provisionRedis sets up the handler's Redis client: the pooled one of
// equal settings, or a new one.
func (h *Handler) provisionRedis() error {
	h.rt.onError = onErrorEnum.mode(h.OnError)
	h.OnError = onErrorEnum.orDefault(h.OnError)
	rc := h.Redis
	if rc == nil {
		rc = new(RedisConfig)
	}
	conf, err := rc.resolved()
	if err != nil {
		return err
	}
	opts, err := conf.universalOptions()
	if err != nil {
		return err
	}
	key, err := conf.poolKey()
	if err != nil {
		return err
	}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newRedisClient(opts, conf.KeyPrefix, h.rt.logger), nil
	})
	if err != nil {
		return err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	h.rt.redis = v.(*redisstore.Client)
	h.rt.redisConf = conf
	h.rt.inflight = new(atomic.Int64)
	h.rt.releases = new(pendingReleases)
	h.rt.leases = new(leasesInFlight)
	return nil
}

// zoneStores sets z.store (and z.fallback with on_error local): for
// store memory the zone's memory store, shared by the handlers that name
// the zone and carried over from the previous config load when the zone is
// unchanged (see storeKey); for store redis the Lua store on the shared
// client, or with sync_interval the zone's two-layer store.
func (h *Handler) zoneStores(z *zone, lim algorithms.Limiter, key storeKey) error {
	switch storeEnum.mode(h.Store) {
	case storeMemory:
		m, err := h.memoryStore(lim, z, key)
		if err != nil {
			return err
		}
		z.store = m
		z.sharesClock = h.rt.opts.now == nil
		return nil
	case storeRedis: // below
	default: // a store in storeEnum that nothing builds
		return fmt.Errorf("store %s: no zone store is built for it", h.Store)
	}

	if h.rt.onError == onErrorLocal {
		key.config += "\x00local"
		m, err := h.memoryStore(lim, z, key)
		if err != nil {
			return err
		}
		z.fallback = m
	}
	opts := redisstore.Options{KeyPrefix: h.rt.redisConf.KeyPrefix, Zone: z.name, BlockFor: z.blockFor}
	// The two-layer and leasing stores decide under the limits they were
	// made with, one store per Redis client: other limits or another
	// client make another (the two-layer counts in Redis carry over; the
	// lease's keys name the limits, so it counts afresh).
	var pooled string
	if h.SyncInterval > 0 || h.Lease > 0 {
		redisKey, err := h.rt.redisConf.poolKey()
		if err != nil {
			return err
		}
		limits, err := json.Marshal(lim.Config())
		if err != nil {
			return err
		}
		pooled = string(redisKey) + "\x00" + string(limits)
	}
	if h.SyncInterval > 0 {
		// Two-layer: decisions are local (no Redis call, no breaker);
		// the store pushes its counts every interval.
		key.config += "\x00sync\x00" + pooled
		st, err := h.syncStore(lim, z.name, opts, key)
		if err != nil {
			return err
		}
		z.store = st
		return nil
	}
	opts.Pipeliner = h.rt.redis.Pipeliner()
	if h.Lease > 0 {
		// Leasing: local decisions from leased units, a Redis call per
		// lease (the breaker and on_error apply to it); the store gives
		// back its leases when unloaded.
		key.config += "\x00lease\x00" + pooled
		st, err := h.pooledStore(z.name, key, func() (caddy.Destructor, error) {
			return redisstore.NewLeaseStore(h.rt.redis, lim, opts, redisstore.LeaseOptions{
				Duration: time.Duration(h.Lease),
				Now:      h.rt.opts.now,
				MaxKeys:  h.MaxKeys,
				OnError:  h.onStoreError(z.name, "rate limit lease give-back to Redis failed; the units stay charged until the lease's state expires"),
			})
		})
		if err != nil {
			return err
		}
		z.store = st.(*redisstore.LeaseStore)
		z.breaker, z.redis = h.rt.redis.Breaker(), h.rt.redis
		return nil
	}
	st, err := redisstore.NewStore(h.rt.redis, lim, opts)
	if err != nil {
		return err
	}
	z.store = st
	z.breaker, z.redis = h.rt.redis.Breaker(), h.rt.redis
	// A denial holds until its Retry-After for the same cost (the cache
	// asks Redis again after a second, for resets made elsewhere), unless it
	// must be counted (count_rejected), quota comes back at any time
	// (concurrency, count_status), the cost or the limits vary per
	// request, or the zone waits or never rejects.
	if !lim.Config().CountRejected && !z.lease && z.countStatus == nil && z.costTmpl == "" && z.reqLimits == nil && !z.wait && !h.DryRun {
		z.denies = redisstore.NewDenyCache(st)
		z.store = z.denies
	}
	return nil
}

// onStoreError returns the OnError of a zone's store that works in the
// background: msg logged with the zone's name, throttled (logThrottle).
func (h *Handler) onStoreError(name, msg string) func(error) {
	logger := h.rt.logger
	var throttle logThrottle
	return func(err error) {
		if c := logger.Check(throttle.level(), msg); c != nil {
			c.Write(zap.String("zone", name), zap.Error(err))
		}
	}
}

// syncStore returns the two-layer store of key: the pooled one of the
// previous config load if the zone is unchanged (its local counts and
// pending pushes carry over), else a new one.
func (h *Handler) syncStore(lim algorithms.Limiter, name string, opts redisstore.Options, key storeKey) (*redisstore.SyncStore, error) {
	so := redisstore.SyncOptions{
		Interval: time.Duration(h.SyncInterval),
		Now:      h.rt.opts.now,
		MaxKeys:  h.MaxKeys,
		OnError:  h.onStoreError(name, "rate limit sync to Redis failed; counts kept and pushed at the next interval"),
		OnRecover: func(failed int) {
			h.rt.logger.Info("rate limit sync to Redis works again", zap.String("zone", name), zap.Int("failed_syncs", failed))
		},
	}
	st, err := h.pooledStore(name, key, func() (caddy.Destructor, error) {
		return redisstore.NewSyncStore(h.rt.redis, lim, opts, so)
	})
	if err != nil {
		return nil, err
	}
	return st.(*redisstore.SyncStore), nil
}

// memoryStore returns the memory store of key deciding under lim: the
// pooled one of the previous config load if the zone is unchanged but for
// its limits, else a new one.
func (h *Handler) memoryStore(lim algorithms.Limiter, z *zone, key storeKey) (store.Store, error) {
	opts := store.MemoryOptions{
		MaxKeys:       h.MaxKeys,
		SweepInterval: time.Duration(h.SweepInterval),
		Now:           h.rt.opts.now,
		BlockFor:      z.blockFor,
	}
	st, err := h.pooledStore(z.name, key, func() (caddy.Destructor, error) {
		return store.NewMemory(lim, opts), nil
	})
	if err != nil {
		return nil, err
	}
	return st.(*store.Memory).Under(lim)
}

// pooledStore returns the store of key from the reload pool, made by
// newStore when the previous config load has none.
func (h *Handler) pooledStore(name string, key storeKey, newStore func() (caddy.Destructor, error)) (caddy.Destructor, error) {
	v, loaded, err := pool.LoadOrNew(key, newStore)
	if err != nil {
		return nil, err
	}
	h.rt.poolKeys = append(h.rt.poolKeys, key)
	if loaded {
		h.rt.logger.Debug("zone state shared with another handler or carried over from the previous config",
			zap.String("zone", name))
	}
	return v.(caddy.Destructor), nil
}
