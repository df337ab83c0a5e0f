package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/lua"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// onErrorMode is what a request gets when the redis store fails.
type onErrorMode uint8

const (
	onErrorOpen   onErrorMode = iota // let it through
	onErrorClosed                    // 503
	onErrorLocal                     // decide with the zone's memory fallback
)

// redisClient is a Redis client shared, through the reload pool, by every
// handler with the same Redis settings. It outlives a config reload and
// is closed when its last user is cleaned up.
type redisClient struct {
	redis.UniversalClient

	// breaker stops calling Redis after repeated failures, until a
	// background probe (a script that writes, see probe) succeeds: while it
	// is open, on_error decides at once instead of every request paying a
	// timeout.
	breaker *breaker.Breaker

	// pipe coalesces the decisions of concurrent requests into pipelines.
	pipe *lua.Pipeliner

	probeTimeout time.Duration
	probePrefix  string // the key_prefix of the probe's key
}

// Breaker settings: five failures in a row (within 10s) open it; a probe
// every 250ms closes it again once Redis runs a script that writes.
const (
	breakerFailures      = 5
	breakerWindow        = 10 * time.Second
	breakerProbeInterval = 250 * time.Millisecond
)

// newRedisClient connects (lazily) with opts; its breaker's probe writes
// under keyPrefix, and the breaker's state changes are logged to logger,
// once each.
func newRedisClient(opts *redis.UniversalOptions, keyPrefix string, logger *zap.Logger) *redisClient {
	c := &redisClient{
		UniversalClient: redis.NewUniversalClient(opts),
		probeTimeout:    opts.DialTimeout + opts.ReadTimeout,
		probePrefix:     keyPrefix,
	}
	c.pipe = lua.NewPipeliner(c.UniversalClient)
	c.breaker = breaker.New(breaker.Options{
		Failures:      breakerFailures,
		Window:        breakerWindow,
		ProbeInterval: breakerProbeInterval,
		Probe:         c.probe,
		OnStateChange: func(from, to breaker.State) {
			if to == breaker.Open {
				err := c.breaker.Err()
				fields := []zap.Field{zap.Strings("addresses", opts.Addrs), zap.Error(err)}
				if hint := redisHint(err); hint != "" {
					fields = append(fields, zap.String("hint", hint))
				}
				logger.Warn("Redis failing: circuit breaker open, requests decided by on_error until Redis runs the rate limit scripts again", fields...)
			} else {
				logger.Info("Redis works again: circuit breaker closed", zap.Strings("addresses", opts.Addrs))
			}
		},
	})
	return c
}

// probeScript is what the breaker's probe runs: like a decision, a script
// (EVALSHA, EVAL when Redis lacks it) that writes a key with a TTL. A PING
// would succeed where every decision fails: an ACL user that may not run
// scripts (NOPERM), a full Redis with maxmemory-policy noeviction (OOM), a
// replica (READONLY). The breaker would then close at every probe and trip
// again at the next requests, logging both each time.
var probeScript = redis.NewScript(`redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) return 1`)

// probeKeyTTL is the TTL of the probe's key, in milliseconds: it is
// written every breakerProbeInterval while Redis fails, and expires soon
// after.
const probeKeyTTL = 10_000

// probeKey is the name of the probe's key: the key prefix, then
// "breaker-probe", then on a Cluster a hash tag that puts it in a given
// slot. No zone's key has that name: a zone's keys never end with the
// hash tag, nor without one.
func probeKey(prefix, tag string) string {
	if tag == "" {
		return prefix + "breaker-probe"
	}
	return prefix + "breaker-probe:{" + tag + "}"
}

// probe is the breaker's probe: the probe script on the node, or on every
// master of a Cluster. A Cluster whose masters all write again is healthy;
// probing one key would test a single master, and a breaker tripped by
// another one's failures would close while they go on.
func (c *redisClient) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout)
	defer cancel()
	cc, ok := c.UniversalClient.(*redis.ClusterClient)
	if !ok {
		return probeScript.Run(ctx, c.UniversalClient, []string{probeKey(c.probePrefix, "")}, probeKeyTTL).Err()
	}
	// A dead master answers nothing (no MOVED), so go-redis would keep
	// its slot map, and send that master's keys to it, for up to a
	// minute: reload it, to find the replica that took over.
	cc.ReloadState(ctx)
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS is what go-redis reads its own slot map with.
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	masters, keys := probeKeys(c.probePrefix, slots)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			if err := probeScript.Run(ctx, cc, []string{key}, probeKeyTTL).Err(); err != nil {
				errs[i] = fmt.Errorf("master %s: %w", masters[i], err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// probeKeys returns the masters of a Cluster's slot map and a probe key
// in a slot of each. The hash tags are the first decimal numbers that hash
// to a slot of a master not found yet: the same keys at every probe while
// the map is the same.
func probeKeys(prefix string, slots []redis.ClusterSlot) (masters, keys []string) {
	owner := func(slot int) string {
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
				return s.Nodes[0].Addr
			}
		}
		return ""
	}
	var all []string
	for _, s := range slots {
		if len(s.Nodes) > 0 && !slices.Contains(all, s.Nodes[0].Addr) {
			all = append(all, s.Nodes[0].Addr)
		}
	}
	// Every slot has a tag below 10^6, and on average a master of n slots
	// is found within 16384/n numbers.
	for i := 0; len(masters) < len(all) && i < 1_000_000; i++ {
		tag := strconv.Itoa(i)
		m := owner(int(crc16(tag)) % clusterSlots)
		if m != "" && !slices.Contains(masters, m) {
			masters = append(masters, m)
			keys = append(keys, probeKey(prefix, tag))
		}
	}
	return masters, keys
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// crc16 is the CRC16 (XMODEM) that Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Destruct stops the breaker's prober and the pipeliner's workers, and
// closes the client.
func (c *redisClient) Destruct() error {
	c.breaker.Close()
	c.pipe.Close()
	return c.UniversalClient.Close()
}

// provisionRedis sets up the handler's Redis client: the pooled one of
// equal settings, or a new one.
func (h *Handler) provisionRedis() error {
	switch h.OnError {
	case "", "open":
		h.rt.onError = onErrorOpen
	case "closed":
		h.rt.onError = onErrorClosed
	case "local":
		h.rt.onError = onErrorLocal
	default:
		return fmt.Errorf("unknown on_error value %q", h.OnError)
	}
	if h.OnError == "" {
		h.OnError = "open"
	}
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
	h.rt.redis = v.(*redisClient)
	h.rt.redisConf = conf
	h.rt.inflight = new(atomic.Int64)
	return nil
}

// zoneStores sets z.store (and z.fallback with on_error local): for
// store memory the zone's memory store, shared by the handlers that name
// the zone and carried over from the previous config load when the zone is
// unchanged (see storeKey); for store redis the Lua store on the shared
// client, or with sync_interval the zone's two-layer store.
func (h *Handler) zoneStores(z *zone, lim algorithms.Limiter, key storeKey) error {
	switch h.Store {
	case "memory":
		m, err := h.memoryStore(lim, z.name, key)
		if err != nil {
			return err
		}
		z.store = m
		z.sharesClock = h.rt.opts.now == nil
		return nil
	case "redis":
	default:
		return fmt.Errorf("unknown store %q", h.Store)
	}

	if h.rt.onError == onErrorLocal {
		key.config += "\x00local"
		m, err := h.memoryStore(lim, z.name, key)
		if err != nil {
			return err
		}
		z.fallback = m
	}
	opts := lua.Options{KeyPrefix: h.rt.redisConf.KeyPrefix, Zone: z.name}
	if h.SyncInterval > 0 {
		// Two-layer: decisions are local (no Redis call, no breaker);
		// the store pushes its counts every interval, through the
		// handler's client: one store per client.
		redisKey, err := h.rt.redisConf.poolKey()
		if err != nil {
			return err
		}
		key.config += "\x00sync\x00" + string(redisKey)
		st, err := h.syncStore(lim, z.name, opts, key)
		if err != nil {
			return err
		}
		z.store = st
		return nil
	}
	opts.Pipeliner = h.rt.redis.pipe
	st, err := lua.NewStore(h.rt.redis, lim, opts)
	if err != nil {
		return err
	}
	z.store = st
	z.breaker = h.rt.redis.breaker
	// A denial holds until its Retry-After for the same cost, unless it
	// must be counted (count_rejected), quota comes back at any time
	// (concurrency, count_status), the cost varies per request, or the
	// zone waits or never rejects.
	if !lim.Config().CountRejected && !z.lease && z.countStatus == nil && z.costTmpl == "" && !z.wait && !h.DryRun {
		z.denies = newDenyCache()
	}
	return nil
}

// syncStore returns the two-layer store of key: the pooled one of the
// previous config load if the zone is unchanged (its local counts and
// pending pushes carry over), else a new one.
func (h *Handler) syncStore(lim algorithms.Limiter, name string, opts lua.Options, key storeKey) (*lua.SyncStore, error) {
	logger := h.rt.logger
	var throttle logThrottle
	so := lua.SyncOptions{
		Interval: time.Duration(h.SyncInterval),
		Now:      h.rt.opts.now,
		MaxKeys:  h.MaxKeys,
		OnError: func(err error) {
			if c := logger.Check(throttle.level(), "rate limit sync to Redis failed; counts kept and pushed at the next interval"); c != nil {
				c.Write(zap.String("zone", name), zap.Error(err))
			}
		},
	}
	st, err := h.pooledStore(name, key, func() (caddy.Destructor, error) {
		return lua.NewSyncStore(h.rt.redis, lim, opts, so)
	})
	if err != nil {
		return nil, err
	}
	return st.(*lua.SyncStore), nil
}

// memoryStore returns the memory store of key: the pooled one of the
// previous config load if the zone is unchanged, else a new one.
func (h *Handler) memoryStore(lim algorithms.Limiter, name string, key storeKey) (*store.Memory, error) {
	opts := store.MemoryOptions{
		MaxKeys:       h.MaxKeys,
		SweepInterval: time.Duration(h.SweepInterval),
		Now:           h.rt.opts.now,
	}
	st, err := h.pooledStore(name, key, func() (caddy.Destructor, error) {
		return store.NewMemory(lim, opts), nil
	})
	if err != nil {
		return nil, err
	}
	return st.(*store.Memory), nil
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
