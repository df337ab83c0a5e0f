package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
)

// Client is a Redis client shared by the stores of every zone (and, through
// Caddy's reload pool, of every handler) with the same Redis settings, with
// what they share besides the connections: circuit breakers and a
// Pipeliner. Destruct closes it.
type Client struct {
	redis.UniversalClient

	// breaker stops calling Redis after repeated failures, until a
	// background probe (a script that writes, see Probe) succeeds: while it
	// is open, the caller decides at once instead of every request paying a
	// timeout. On a Cluster each master has its own (see BreakerFor) and
	// this one stands for the calls no master was found for.
	breaker *breaker.Breaker

	cluster *redis.ClusterClient // the client, on a Cluster
	masters masterBreakers       // on a Cluster: a breaker per master
	closed  bool                 // Destruct was called; under masters.mu

	newBreaker func(master string, probe func(context.Context) error) *breaker.Breaker

	// pipe coalesces the decisions of concurrent requests into pipelines.
	pipe *Pipeliner

	// master, on Sentinel, moves pipe's connection to a new master.
	master *masterWatch

	probeTimeout time.Duration
	probePrefix  string // the key_prefix of the probe's key
}

// ClientOptions tunes a Client.
type ClientOptions struct {
	// KeyPrefix starts the name of the key the breaker's probe writes (see
	// Probe).
	KeyPrefix string

	// OnBreakerChange, if set, is called when a breaker opens (open, with
	// the error that tripped it) and when it closes again, once each.
	// master is the address of the Cluster master whose breaker it is, or
	// empty for the Client's one breaker.
	OnBreakerChange func(master string, open bool, err error)

	// OnProbeFailure, if set, is called with the error of every probe
	// that fails while a breaker is open, from the breaker's prober.
	OnProbeFailure func(master string, err error)
}

// Breaker settings: BreakerFailures failures in a row (within
// breakerWindow) open it; a probe every breakerProbeInterval closes it
// again once Redis runs a script that writes.
const (
	BreakerFailures      = 5
	breakerWindow        = 10 * time.Second
	breakerProbeInterval = 250 * time.Millisecond
)

// NewClient connects (lazily) with opts, after setting their retries,
// pipeline pool and context handling to the policy the stores rely on (see
// setPolicy): it changes *opts, which the Client keeps using.
func NewClient(opts *redis.UniversalOptions, o ClientOptions) *Client {
	setPolicy(opts)
	c := &Client{
		UniversalClient: redis.NewUniversalClient(opts),
		probeTimeout:    opts.DialTimeout + opts.ReadTimeout,
		probePrefix:     o.KeyPrefix,
	}
	c.pipe = NewDirectPipeliner(c.UniversalClient, opts.WriteTimeout+opts.ReadTimeout)
	if opts.MasterName != "" && c.pipe.direct != nil && len(opts.Addrs) > 0 {
		c.master = newMasterWatch(opts)
		c.pipe.direct.d.master = c.master
	}
	c.newBreaker = func(master string, probe func(context.Context) error) *breaker.Breaker {
		var b *breaker.Breaker
		b = breaker.New(breaker.Options{
			Failures:      BreakerFailures,
			Window:        breakerWindow,
			ProbeInterval: breakerProbeInterval,
			Probe: func(ctx context.Context) error {
				err := probe(ctx)
				if err != nil && o.OnProbeFailure != nil && ctx.Err() == nil {
					o.OnProbeFailure(master, err)
				}
				return err
			},
			OnStateChange: func(from, to breaker.State) {
				if o.OnBreakerChange != nil {
					o.OnBreakerChange(master, to == breaker.Open, b.Err())
				}
			},
		})
		return b
	}
	probe := c.Probe
	if cc, ok := c.UniversalClient.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(emptySlotMapHook{}) })
		c.cluster = cc
		probe = c.probeSlotMap
	}
	c.breaker = c.newBreaker("", probe)
	return c
}

// Breaker returns the client's circuit breaker: its stores' callers ask it
// before a call and record the outcome. On a Cluster they ask BreakerFor
// the key's.
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

// Destruct stops the breakers' probers and the pipeliner, and closes the
// client.
func (c *Client) Destruct() error {
	c.closeMasters()
	c.breaker.Close()
	c.pipe.Close()
	if c.master != nil {
		c.master.close()
	}
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

// Probe is the probe of a single node's (or Sentinel's master's) breaker:
// the probe script on the node, sent as a decision is (by the Pipeliner:
// on its own connection where it has one), so that the breaker closes
// once decisions get through. (go-redis's pool, after a run of failed
// dials, tries again only once a second: through it, a probe could fail
// for up to a second after Redis is back.) A Cluster's breakers probe
// their own master (see probeMaster).
func (c *Client) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.probeTimeout)
	defer cancel()
	return c.pipe.run(ctx, probeScript, []string{probeKey(c.probePrefix, "")}, []any{probeKeyTTL}).err
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

// setPolicy sets what the stores expect of go-redis on o.
func setPolicy(o *redis.UniversalOptions) {
	// One attempt per decision: a retry doubles the time a request waits
	// on a failing Redis; the caller's on_error decides instead.
	o.MaxRetries = -1
	o.DialerRetries = 1
	// Pipelines (every decision) on the one pool: go-redis's own pipeline
	// pool, when it cannot connect, tries again on the main pool, and a
	// hung Redis then costs two timeouts (a connect and its HELLO on each)
	// instead of one.
	o.PipelinePoolSize = -1
	// The caller's context bounds a call too: a client that went away
	// stops waiting on Redis. (On a single node or a Sentinel master,
	// decisions skip go-redis and watch a context only when it has a
	// deadline; the timeouts bound them: see NewDirectPipeliner.)
	o.ContextTimeoutEnabled = true
	if o.Password == "" && o.OnConnect == nil {
		// Without a password to send, go-redis ignores the NOAUTH with
		// which a Redis that wants one answers HELLO; the first script
		// call then fails as "Protocol error: unauthenticated multibulk
		// length" and the connection is closed (EOF for the next call).
		// A PING on each new connection fails it with the NOAUTH instead.
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.Ping(ctx).Err() }
	}
}
