package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// Client is a Redis client shared by the stores of every zone (and, through
// Caddy's reload pool, of every handler) with the same Redis settings, with
// what they share besides the connections: a circuit breaker and a
// Pipeliner. Destruct closes it.
type Client struct {
	redis.UniversalClient

	// breaker stops calling Redis after repeated failures, until a
	// background probe (a script that writes, see Probe) succeeds: while it
	// is open, the caller decides at once instead of every request paying a
	// timeout.
	breaker *breaker.Breaker

	// pipe coalesces the decisions of concurrent requests into pipelines.
	pipe *Pipeliner

	probeTimeout time.Duration
	probePrefix  string // the key_prefix of the probe's key
}

// ClientOptions tunes a Client.
type ClientOptions struct {
	// KeyPrefix starts the name of the key the breaker's probe writes (see
	// Probe).
	KeyPrefix string

	// OnBreakerChange, if set, is called when the breaker opens (open, with
	// the error that tripped it) and when it closes again, once each.
	OnBreakerChange func(open bool, err error)

	// OnProbeFailure, if set, is called with the error of every probe
	// that fails while the breaker is open, from the breaker's prober.
	OnProbeFailure func(err error)
}

// Breaker settings: BreakerFailures failures in a row (within
// breakerWindow) open it; a probe every breakerProbeInterval closes it
// again once Redis runs a script that writes.
const (
	BreakerFailures      = 5
	breakerWindow        = 10 * time.Second
	breakerProbeInterval = 250 * time.Millisecond
)

// NewClient connects (lazily) with opts.
func NewClient(opts *redis.UniversalOptions, o ClientOptions) *Client {
	c := &Client{
		UniversalClient: redis.NewUniversalClient(opts),
		probeTimeout:    opts.DialTimeout + opts.ReadTimeout,
		probePrefix:     o.KeyPrefix,
	}
	c.pipe = NewDirectPipeliner(c.UniversalClient, opts.WriteTimeout+opts.ReadTimeout)
	c.breaker = breaker.New(breaker.Options{
		Failures:      BreakerFailures,
		Window:        breakerWindow,
		ProbeInterval: breakerProbeInterval,
		Probe: func(ctx context.Context) error {
			err := c.Probe(ctx)
			if err != nil && o.OnProbeFailure != nil && ctx.Err() == nil {
				o.OnProbeFailure(err)
			}
			return err
		},
		OnStateChange: func(from, to breaker.State) {
			if o.OnBreakerChange != nil {
				o.OnBreakerChange(to == breaker.Open, c.breaker.Err())
			}
		},
	})
	return c
}

// Breaker returns the client's circuit breaker: its stores' callers ask it
// before a call and record the outcome.
func (c *Client) Breaker() *breaker.Breaker { return c.breaker }

// Pipeliner returns the client's Pipeliner, for the Options of its Stores.
func (c *Client) Pipeliner() *Pipeliner { return c.pipe }

// AddHook adds a go-redis hook to the client. Its process hooks see every
// command from then on: the Pipeliner sends its calls through go-redis
// instead of its own connection.
func (c *Client) AddHook(h redis.Hook) {
	c.pipe.hooked.Store(true)
	c.UniversalClient.AddHook(h)
}

// Destruct stops the breaker's prober and the pipeliner, and closes the
// client.
func (c *Client) Destruct() error {
	c.breaker.Close()
	c.pipe.Close()
	return c.UniversalClient.Close()
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

// Probe is the breaker's probe: the probe script on the node, or on every
// master of a Cluster. A Cluster whose masters all write again is healthy;
// probing one key would test a single master, and a breaker tripped by
// another one's failures would close while they go on.
func (c *Client) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout)
	defer cancel()
	cc, ok := c.UniversalClient.(*redis.ClusterClient)
	if !ok {
		return evalOne(ctx, c.UniversalClient, probeScript, []string{probeKey(c.probePrefix, "")}, []any{probeKeyTTL}).Err()
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
			if err := evalOne(ctx, cc, probeScript, []string{key}, []any{probeKeyTTL}).Err(); err != nil {
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
