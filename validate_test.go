package ratelimit

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// validZone returns a minimal valid zone named name.
func validZone(name string) *Zone {
	return &Zone{
		Name:   name,
		Key:    "{http.request.remote.host}",
		Limits: []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
	}
}

func TestValidateValid(t *testing.T) {
	tests := []struct {
		name string
		h    Handler
	}{
		{"minimal", Handler{Zones: []*Zone{validZone("a")}}},
		{"two zones", Handler{Zones: []*Zone{validZone("a"), validZone("b")}}},
		{"key resolver instead of key", Handler{Zones: []*Zone{{
			Name:           "jwt",
			KeyResolverRaw: json.RawMessage(`{"resolver":"jwt_claim"}`),
			Limits:         []Limit{{Events: 1, Window: caddy.Duration(time.Millisecond)}},
		}}}},
		{"every option", Handler{
			Zones: []*Zone{{
				Name:          "api",
				Key:           "{http.request.header.X-Org-Id}:{http.request.method}",
				Algorithm:     "token_bucket",
				Limits:        []Limit{{Events: 100, Window: caddy.Duration(time.Second)}, {Events: 1000, Window: caddy.Duration(time.Minute)}},
				Burst:         50,
				Cost:          "{http.request.header.X-Cost}",
				OnLimit:       "wait",
				MaxWait:       caddy.Duration(2 * time.Second),
				CountRejected: true,
				IPv4Prefix:    24,
				IPv6Prefix:    64,
				EmptyKey:      "deny",
			}},
			Store:         "memory",
			Headers:       "ietf",
			Status:        503,
			DryRun:        true,
			Jitter:        1,
			SweepInterval: caddy.Duration(time.Minute),
			MaxKeys:       10,
		}},
		// What Provision leaves behind once it has filled in the defaults.
		{"defaults filled in", Handler{
			Zones: []*Zone{{
				Name:       "a",
				Key:        "{http.request.remote.host}",
				Algorithm:  "sliding_log",
				Limits:     []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
				Cost:       "1",
				OnLimit:    "reject",
				IPv4Prefix: 32,
				IPv6Prefix: 128,
				EmptyKey:   "global",
			}},
			Store:         "memory",
			Headers:       "both",
			Status:        429,
			SweepInterval: caddy.Duration(time.Minute),
			MaxKeys:       defaultMaxKeys,
		}},
		{"concurrency", Handler{Zones: []*Zone{{
			Name: "c", Key: "k", Algorithm: "concurrency",
			Limits: []Limit{{Events: 3, Window: caddy.Duration(time.Minute)}},
		}}}},
		{"every algorithm name", Handler{Zones: []*Zone{
			{Name: "a", Key: "k", Algorithm: "sliding_log", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "b", Key: "k", Algorithm: "sliding_window", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "c", Key: "k", Algorithm: "fixed_window", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "d", Key: "k", Algorithm: "token_bucket", Burst: 1, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "e", Key: "k", Algorithm: "leaky_bucket", Burst: 10, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "f", Key: "k", Algorithm: "gcra", Burst: 3, Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
			{Name: "g", Key: "k", Algorithm: "concurrency", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}},
		}}},
		{"cost equal to limit", Handler{Zones: []*Zone{{
			Name: "a", Key: "k", Cost: "10",
			Limits: []Limit{{Events: 10, Window: caddy.Duration(time.Second)}},
		}}}},
		{"zone name with punctuation", Handler{Zones: []*Zone{validZone("api/v1:login-2.x")}}},

		// mholt/caddy-ratelimit accepts these, with the same meaning here.
		{"no key: one count for the zone", Handler{Zones: []*Zone{{Name: "all", Limits: []Limit{{Events: 5, Window: caddy.Duration(time.Second)}}}}}},
		{"prefixes 0: not set", Handler{Zones: []*Zone{zoneWith(func(z *Zone) { z.IPv4Prefix, z.IPv6Prefix = 0, 0 })}}},
		{"jitter above 1", Handler{Zones: []*Zone{validZone("a")}, Jitter: 2.5}},
		{"jitter at its bound", Handler{Zones: []*Zone{validZone("a")}, Jitter: 10}},
		{"disable_metrics", Handler{Zones: []*Zone{validZone("a")}, DisableMetrics: true}},

		// What Provision fills in, in zones without a key template.
		{"no key, defaults filled in", Handler{Zones: []*Zone{zoneWith(func(z *Zone) {
			z.Key, z.IPv4Prefix, z.IPv6Prefix, z.EmptyKey = "", 32, 128, "global"
		})}}},
		{"key_resolver, defaults filled in", Handler{Zones: []*Zone{zoneWith(func(z *Zone) {
			z.Key, z.KeyResolverRaw, z.IPv4Prefix, z.IPv6Prefix, z.EmptyKey = "", json.RawMessage(`{"resolver":"x"}`), 32, 128, "deny"
		})}}},
		{"escaped braces in key", Handler{Zones: []*Zone{zoneWith(func(z *Zone) { z.Key = `\{literal\}:{http.request.method}` })}}},

		// Lower bounds of the durations, exactly.
		{"durations at their lower bounds", Handler{
			Zones: []*Zone{zoneWith(func(z *Zone) {
				z.Algorithm = "fixed_window"
				z.OnLimit, z.MaxWait = "wait", caddy.Duration(time.Millisecond)
				z.Limits[0].Window = caddy.Duration(time.Millisecond)
			})},
			Store:        "redis",
			SyncInterval: caddy.Duration(10 * time.Millisecond),
			MaxKeys:      10, // the local counts of sync_interval
			Redis: &RedisConfig{DialTimeout: caddy.Duration(time.Millisecond),
				ReadTimeout: caddy.Duration(time.Millisecond), WriteTimeout: caddy.Duration(time.Millisecond)},
		}},
		{"sweep_interval at its lower bound", Handler{Zones: []*Zone{validZone("a")}, SweepInterval: caddy.Duration(time.Second)}},
		{"store redis, on_error local with memory options", Handler{Zones: []*Zone{validZone("a")},
			Store: "redis", OnError: "local", SweepInterval: caddy.Duration(10 * time.Second), MaxKeys: 10}},
		// Provision fills in the memory options' defaults, and on_error
		// open, whatever the store.
		{"store redis, defaults filled in", Handler{Zones: []*Zone{zoneWith(func(z *Zone) { z.Algorithm = "sliding_window" })},
			Store: "redis", OnError: "open", SyncInterval: caddy.Duration(time.Second),
			SweepInterval: caddy.Duration(time.Minute), MaxKeys: defaultMaxKeys}},
		{"redis ports at the ends of the range", Handler{Zones: []*Zone{validZone("a")}, Store: "redis",
			Redis: &RedisConfig{Addresses: []string{"10.0.0.1:1", "[2001:db8::1]:65535"}}}},
		{"redis url with a db", Handler{Zones: []*Zone{validZone("a")}, Store: "redis",
			Redis: &RedisConfig{URL: "rediss://u:p@redis.internal:6380/3"}}},
		{"redis url and db", Handler{Zones: []*Zone{validZone("a")}, Store: "redis",
			Redis: &RedisConfig{URL: "redis://redis.internal:6379", DB: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.h.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

// zoneWith returns a valid zone named "z" changed by f.
func zoneWith(f func(z *Zone)) *Zone {
	z := validZone("z")
	f(z)
	return z
}

func TestValidateInvalid(t *testing.T) {
	zone := func(f func(z *Zone)) *Zone {
		z := validZone("z")
		f(z)
		return z
	}
	one := func(f func(z *Zone)) Handler { return Handler{Zones: []*Zone{zone(f)}} }
	opts := func(f func(h *Handler)) Handler {
		h := Handler{Zones: []*Zone{validZone("z")}}
		f(&h)
		return h
	}
	// redisOpts is opts with store redis and a zone of a counter
	// algorithm (for sync_interval).
	redisOpts := func(f func(h *Handler)) Handler {
		h := Handler{Zones: []*Zone{zone(func(z *Zone) { z.Algorithm = "fixed_window" })}, Store: "redis"}
		f(&h)
		return h
	}
	tests := []struct {
		name string
		h    Handler
		want string
	}{
		{"no zones", Handler{}, "no zones"},
		{"block_for in nanoseconds", one(func(z *Zone) { z.BlockFor = 60 }), `block_for must be at least 1ms, got 60ns: a JSON number is nanoseconds; write a duration string such as "60s"`},
		{"block_for negative", one(func(z *Zone) { z.BlockFor = caddy.Duration(-time.Second) }), "block_for must be at least 1ms, got -1s"},
		{"block_for above bound", one(func(z *Zone) { z.BlockFor = caddy.Duration(3651 * 24 * time.Hour) }), "block_for must be at most 3650d (about 10 years)"},
		{"block_for fraction of a microsecond", one(func(z *Zone) { z.BlockFor = caddy.Duration(time.Second + 1) }), "block_for must be a whole number of microseconds, got 1.000000001s"},
		{"block_for longer than max_wait", one(func(z *Zone) {
			z.OnLimit, z.MaxWait, z.BlockFor = "wait", caddy.Duration(time.Second), caddy.Duration(time.Minute)
		}), "block_for 1m0s is longer than max_wait 1s: with on_limit wait every denied request would be rejected without waiting"},
		{"null zone", Handler{Zones: []*Zone{nil}}, "zone 1: empty (null) zone"},
		{"no name", one(func(z *Zone) { z.Name = "" }), "zone 1: zone name is empty"},
		{"name with space", one(func(z *Zone) { z.Name = "a b" }), `zone name "a b"`},
		{"name with quote", one(func(z *Zone) { z.Name = `a"b` }), "zone name"},
		{"name with brace", one(func(z *Zone) { z.Name = "a{b}" }), "zone name"},
		{"name not ASCII", one(func(z *Zone) { z.Name = "zoné" }), "zone name"},
		{"name too long", one(func(z *Zone) { z.Name = strings.Repeat("a", 129) }), "longer than 128"},
		{"duplicate names", Handler{Zones: []*Zone{validZone("a"), validZone("b"), validZone("a")}}, `duplicate zone name "a" (zones 1 and 3)`},
		{"key unclosed placeholder", one(func(z *Zone) { z.Key = "{http.request.header.X-Api-Key" }), `zone "z": key: unclosed placeholder "{http.request.header.X-Api-Key"`},
		{"key stray brace", one(func(z *Zone) { z.Key = "{http.request.method}}" }), "'}' closes no placeholder"},
		{"key nested placeholder", one(func(z *Zone) { z.Key = "{a{b}}" }), "placeholders do not nest"},
		{"key empty placeholder", one(func(z *Zone) { z.Key = "{}" }), "empty placeholder {}"},
		{"ipv4_prefix without key", one(func(z *Zone) { z.Key = ""; z.IPv4Prefix = 24 }), "ipv4_prefix groups the addresses of a key template; this zone has no key"},
		{"ipv6_prefix with key_resolver", one(func(z *Zone) {
			z.Key, z.KeyResolverRaw, z.IPv6Prefix = "", json.RawMessage(`{"resolver":"x"}`), 64
		}), "ipv6_prefix groups the addresses of a key template; this zone has a key_resolver"},
		{"empty_key without key", one(func(z *Zone) { z.Key = ""; z.EmptyKey = "allow" }), "empty_key allow applies to a key that evaluates to nothing; this zone has no key"},
		{"empty_key with a static key", one(func(z *Zone) { z.Key = "login"; z.EmptyKey = "deny" }), `this zone has the static key "login"`},
		{"empty_key with escaped braces only", one(func(z *Zone) { z.Key = `\{login\}`; z.EmptyKey = "deny" }), `this zone has the static key "\\{login\\}"`},
		{"ipv4_prefix with escaped braces only", one(func(z *Zone) { z.Key = `\{192.0.2.1\}`; z.IPv4Prefix = 24 }), "ipv4_prefix groups the addresses of a key template"},
		{"cost of escaped braces", one(func(z *Zone) { z.Cost = `\{5\}` }), `cost must be a positive integer or a placeholder, got "\\{5\\}"`},
		{"ipv6_prefix with a static key", one(func(z *Zone) { z.Key = "2001:db8::1"; z.IPv6Prefix = 64 }), `ipv6_prefix groups the addresses of a key template; this zone has the static key "2001:db8::1"`},
		{"window with nanoseconds", one(func(z *Zone) { z.Limits[0].Window = caddy.Duration(time.Second + 1) }), "limit 1: window must be a whole number of microseconds, got 1.000000001s"},
		{"key and resolver", one(func(z *Zone) { z.KeyResolverRaw = json.RawMessage(`{"resolver":"x"}`) }), "mutually exclusive"},
		{"unknown algorithm", one(func(z *Zone) { z.Algorithm = "leaky" }), `unknown algorithm "leaky" (want one of sliding_log, sliding_window, fixed_window, token_bucket, leaky_bucket, gcra, concurrency)`},
		{"no limits", one(func(z *Zone) { z.Limits = nil }), `zone "z": no limit`},
		{"zero events", one(func(z *Zone) { z.Limits[0].Events = 0 }), "limit 1: events must be positive, got 0"},
		{"negative events", one(func(z *Zone) {
			z.Limits = append(z.Limits, Limit{Events: -1, Window: caddy.Duration(time.Minute)})
		}), "limit 2: events must be positive, got -1"},
		{"zero window", one(func(z *Zone) { z.Limits[0].Window = 0 }), "limit 1: window must be at least 1ms, got 0s"},
		{"negative window", one(func(z *Zone) { z.Limits[0].Window = caddy.Duration(-time.Second) }), "window must be at least 1ms, got -1s"},
		{"window under 1ms", one(func(z *Zone) { z.Limits[0].Window = caddy.Duration(999 * time.Microsecond) }), "window must be at least 1ms"},
		{"concurrency two limits", one(func(z *Zone) {
			z.Algorithm = "concurrency"
			z.Limits = append(z.Limits, Limit{Events: 100, Window: caddy.Duration(time.Hour)})
		}), "concurrency takes exactly one limit"},
		{"concurrency count_rejected", one(func(z *Zone) { z.Algorithm = "concurrency"; z.CountRejected = true }), "count_rejected does not apply to algorithm concurrency"},
		{"burst default algorithm", one(func(z *Zone) { z.Burst = 5 }), "burst applies only to algorithms token_bucket, leaky_bucket and gcra, not sliding_log"},
		{"burst sliding_window", one(func(z *Zone) { z.Algorithm = "sliding_window"; z.Burst = 5 }), "not sliding_window"},
		{"burst concurrency", one(func(z *Zone) { z.Algorithm = "concurrency"; z.Burst = 5 }), "not concurrency"},
		{"negative burst", one(func(z *Zone) { z.Algorithm = "gcra"; z.Burst = -1 }), "burst must be positive, got -1"},
		{"cost word", one(func(z *Zone) { z.Cost = "heavy" }), `cost must be a positive integer or a placeholder, got "heavy"`},
		{"cost zero", one(func(z *Zone) { z.Cost = "0" }), "cost must be positive, got 0"},
		{"cost negative", one(func(z *Zone) { z.Cost = "-3" }), "cost must be positive, got -3"},
		{"cost unclosed placeholder", one(func(z *Zone) { z.Cost = "{http.request.header.X" }), `cost: unclosed placeholder "{http.request.header.X"`},
		{"cost stray brace", one(func(z *Zone) { z.Cost = "http.request.header.X}" }), "'}' closes no placeholder"},
		{"cost above bound", one(func(z *Zone) { z.Cost = "1125899906842625" }), "cost must be at most 1125899906842624"},
		{"cost above events", one(func(z *Zone) { z.Cost = "11" }), "cost 11 exceeds limit 1 (10 events)"},
		{"cost above burst", one(func(z *Zone) { z.Algorithm = "token_bucket"; z.Burst = 3; z.Cost = "4" }), "cost 4 exceeds limit 1 (3 burst)"},
		{"on_limit unknown", one(func(z *Zone) { z.OnLimit = "queue" }), `unknown on_limit value "queue" (want one of reject, wait)`},
		{"wait without max_wait", one(func(z *Zone) { z.OnLimit = "wait" }), "on_limit wait needs a positive max_wait"},
		{"wait negative max_wait", one(func(z *Zone) { z.OnLimit = "wait"; z.MaxWait = caddy.Duration(-time.Second) }), "needs a positive max_wait"},
		{"max_wait in nanoseconds", one(func(z *Zone) { z.OnLimit = "wait"; z.MaxWait = 5 }),
			`max_wait must be at least 1ms, got 5ns: a JSON number is nanoseconds; write a duration string such as "5s"`},
		{"max_wait under 1ms", one(func(z *Zone) { z.OnLimit = "wait"; z.MaxWait = caddy.Duration(999 * time.Microsecond) }), "max_wait must be at least 1ms, got 999µs"},
		{"max_wait without wait", one(func(z *Zone) { z.MaxWait = caddy.Duration(time.Second) }), "max_wait applies only with on_limit wait"},
		{"max_wait with reject", one(func(z *Zone) { z.OnLimit = "reject"; z.MaxWait = caddy.Duration(time.Second) }), "max_wait applies only with on_limit wait"},
		{"ipv4_prefix 33", one(func(z *Zone) { z.IPv4Prefix = 33 }), "ipv4_prefix must be between 1 and 32 bits (or 0: not set), got 33"},
		{"ipv4_prefix negative", one(func(z *Zone) { z.IPv4Prefix = -1 }), "ipv4_prefix must be between 1 and 32 bits (or 0: not set), got -1"},
		{"ipv6_prefix 129", one(func(z *Zone) { z.IPv6Prefix = 129 }), "ipv6_prefix must be between 1 and 128 bits (or 0: not set), got 129"},
		{"empty_key unknown", one(func(z *Zone) { z.EmptyKey = "skip" }), `unknown empty_key value "skip" (want one of allow, deny, global)`},
		{"store unknown", opts(func(h *Handler) { h.Store = "disk" }), `unknown store "disk" (want one of memory, redis)`},
		{"headers unknown", opts(func(h *Handler) { h.Headers = "all" }), `unknown headers value "all" (want one of ietf, legacy, both, off)`},
		{"status 200", opts(func(h *Handler) { h.Status = 200 }), "status must be a 4xx or 5xx code (400 to 599), got 200"},
		{"status 399", opts(func(h *Handler) { h.Status = 399 }), "got 399"},
		{"status 600", opts(func(h *Handler) { h.Status = 600 }), "got 600"},
		{"status negative", opts(func(h *Handler) { h.Status = -429 }), "got -429"},
		{"jitter negative", opts(func(h *Handler) { h.Jitter = -0.5 }), "jitter must be a non-negative fraction (e.g. 0.2: up to 20% more), got -0.5"},
		{"jitter NaN", opts(func(h *Handler) { h.Jitter = math.NaN() }), "got NaN"},
		{"jitter infinite", opts(func(h *Handler) { h.Jitter = math.Inf(1) }), "got +Inf"},
		{"jitter huge", opts(func(h *Handler) { h.Jitter = 1e308 }), "jitter must be at most 10 (up to 11 times the wait), got 1e+308"},
		{"sweep_interval negative", opts(func(h *Handler) { h.SweepInterval = caddy.Duration(-time.Second) }), "sweep_interval must be at least 1s, got -1s"},
		{"sweep_interval in nanoseconds", opts(func(h *Handler) { h.SweepInterval = 60 }),
			`sweep_interval must be at least 1s, got 60ns: a JSON number is nanoseconds; write a duration string such as "60s"`},
		{"sweep_interval under 1s", opts(func(h *Handler) { h.SweepInterval = caddy.Duration(999 * time.Millisecond) }), "sweep_interval must be at least 1s, got 999ms"},
		{"sync_interval in nanoseconds", redisOpts(func(h *Handler) { h.SyncInterval = 1000 }),
			`sync_interval must be at least 10ms, got 1µs: a JSON number is nanoseconds; write a duration string such as "1000s"`},
		{"sync_interval under 10ms", redisOpts(func(h *Handler) { h.SyncInterval = caddy.Duration(9 * time.Millisecond) }), "sync_interval must be at least 10ms, got 9ms"},
		{"read_timeout in nanoseconds", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{ReadTimeout: 250} }),
			`redis: read_timeout must be at least 1ms, got 250ns: a JSON number is nanoseconds`},
		{"dial_timeout over a minute", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{DialTimeout: caddy.Duration(time.Hour)} }),
			`redis: dial_timeout must be at most 1m0s (a request waits that long for a hung Redis), got 1h0m0s`},
		{"dial_timeout negative", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{DialTimeout: caddy.Duration(-time.Second)} }), "redis: dial_timeout must be at least 1ms, got -1s"},
		{"write_timeout under 1ms", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{WriteTimeout: caddy.Duration(time.Microsecond)} }), "redis: write_timeout must be at least 1ms, got 1µs"},
		{"redis address port 0", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{Addresses: []string{"10.0.0.1:0"}} }), `address "10.0.0.1:0": port "0" is not a TCP port (1 to 65535)`},
		{"redis address port 65536", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{Addresses: []string{"10.0.0.1:65536"}} }), `port "65536" is not a TCP port`},
		{"redis address port word", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{Addresses: []string{"10.0.0.1:redis"}} }), `port "redis" is not a TCP port`},
		{"redis cluster address port", redisOpts(func(h *Handler) {
			h.Redis = &RedisConfig{Addresses: []string{"10.0.0.1:7000", "10.0.0.2:-7000"}}
		}), `address "10.0.0.2:-7000": port "-7000" is not a TCP port`},
		{"redis sentinel address port", redisOpts(func(h *Handler) {
			h.Redis = &RedisConfig{SentinelMaster: "m", SentinelAddresses: []string{"10.0.0.1:263790"}}
		}), `port "263790" is not a TCP port`},
		{"redis url port", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://:pw@10.0.0.1:0/1"} }), `url "redis://:xxxxx@10.0.0.1:0/1": port "0" is not a TCP port`},
		{"redis url empty port", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:"} }), `port "" is not a TCP port`},
		{"redis url scheme", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "http://10.0.0.1:6379"} }), "url must start with redis:// or rediss://"},
		{"redis url db and db", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:6379/3", DB: 4} }), `db 4 and the url's database "3"`},
		{"redis address unclosed placeholder", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{Addresses: []string{"{env.REDIS_ADDR"}} }), `unclosed placeholder "{env.REDIS_ADDR"`},
		{"redis url unclosed placeholder", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://{env.REDIS_HOST:6379"} }), `redis: url: unclosed placeholder`},
		{"redis sentinel master stray brace", redisOpts(func(h *Handler) {
			h.Redis = &RedisConfig{SentinelMaster: "env.MASTER}", SentinelAddresses: []string{"10.0.0.1:26379"}}
		}), "redis: sentinel master: '}' closes no placeholder"},
		{"redis pool_size above bound", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{PoolSize: 1<<20 + 1} }), "pool_size must be at most 1048576"},
		{"redis address twice", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{Addresses: []string{"10.0.0.1:6379", "10.0.0.1:6379"}} }), `redis: address "10.0.0.1:6379" given twice`},
		{"redis sentinel address twice", redisOpts(func(h *Handler) {
			h.Redis = &RedisConfig{SentinelMaster: "m", SentinelAddresses: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.1:26379"}}
		}), `redis: address "10.0.0.1:26379" given twice`},
		{"redis url without host", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "rediss://"} }), `redis: url "rediss://" has no host`},
		{"redis url without host, with password", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://:pw@:6379"} }), `redis: url "redis://:xxxxx@:6379" has no host`},
		{"redis url options", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:6379/0?pool_size=5"} }), `nothing after '?' or '#' is read`},
		{"redis url fragment", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:6379#x"} }), `nothing after '?' or '#' is read`},
		{"redis url database word", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:6379/zero"} }), `redis: url: invalid database number: "zero"`},
		{"redis url database above Redis's", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "redis://10.0.0.1:6379/2147483648"} }), "redis: db must be at most 2147483647, got 2147483648"},
		{"redis db above Redis's", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{DB: 99999999999} }), "redis: db must be at most 2147483647, got 99999999999"},
		{"redis tls with a REDIS:// url", redisOpts(func(h *Handler) { h.Redis = &RedisConfig{URL: "REDIS://10.0.0.1:6379", TLS: &RedisTLS{}} }), "redis: tls with a redis:// url"},
		{"on_error closed with sync_interval", redisOpts(func(h *Handler) { h.SyncInterval = caddy.Duration(time.Second); h.OnError = "closed" }), "on_error closed does not apply with sync_interval"},
		{"on_error local with sync_interval", redisOpts(func(h *Handler) { h.SyncInterval = caddy.Duration(time.Second); h.OnError = "local" }), "on_error local does not apply with sync_interval"},
		{"sweep_interval with store redis", redisOpts(func(h *Handler) { h.SweepInterval = caddy.Duration(30 * time.Second) }), "sweep_interval applies to keys held in memory: with store redis only with on_error local"},
		{"sweep_interval with store redis and sync_interval", redisOpts(func(h *Handler) {
			h.SyncInterval = caddy.Duration(time.Second)
			h.SweepInterval = caddy.Duration(30 * time.Second)
		}), "sweep_interval applies to keys held in memory"},
		{"max_keys with store redis", redisOpts(func(h *Handler) { h.MaxKeys = 10; h.OnError = "closed" }), "max_keys applies to keys held in memory: with store redis only with on_error local or sync_interval"},
		{"max_keys negative", opts(func(h *Handler) { h.MaxKeys = -1 }), "max_keys must not be negative, got -1"},
		{"second zone named in error", Handler{Zones: []*Zone{validZone("ok"), zone(func(z *Zone) { z.Name = "bad"; z.Limits = nil })}}, `zone "bad": no limit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.h.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateJSON decodes handler configurations as Caddy would from JSON
// and validates them.
func TestValidateJSON(t *testing.T) {
	tests := []struct {
		name string
		json string
		want string // empty: valid
	}{
		{"minimal", `{"zones":[{"name":"a","key":"{http.request.remote.host}","limits":[{"events":10,"window":1000000000}]}]}`, ""},
		{"duration strings", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1m"}],"on_limit":"wait","max_wait":"500ms"}],"sweep_interval":"30s"}`, ""},
		{"window in days", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1d"}]}]}`, ""},
		{"window as bare number", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":1000}]}]}`, "window must be at least 1ms, got 1µs"},
		{"window as seconds", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":60}]}]}`,
			`limit 1: window must be at least 1ms, got 60ns: a JSON number is nanoseconds; write a duration string such as "60s"`},
		{"sweep_interval as seconds", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1m"}]}],"sweep_interval":60}`,
			`sweep_interval must be at least 1s, got 60ns: a JSON number is nanoseconds; write a duration string such as "60s"`},
		{"max_wait as seconds", `{"zones":[{"name":"a","key":"k","on_limit":"wait","max_wait":2,"limits":[{"events":10,"window":"1m"}]}]}`,
			"max_wait must be at least 1ms, got 2ns"},
		{"read_timeout as milliseconds", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1m"}]}],"store":"redis","redis":{"read_timeout":250}}`,
			"redis: read_timeout must be at least 1ms, got 250ns"},
		{"on_error unknown, memory store", `{"zones":[{"name":"a","key":"k","limits":[{"events":10,"window":"1m"}]}],"on_error":"explode"}`,
			`unknown on_error value "explode"`},
		{"events placeholder never a number", `{"zones":[{"name":"a","key":"k","limits":[{"events_placeholder":"x{http.request.header.X-Plan}","events":10,"max_events":50,"window":"1m"}]}]}`,
			`can never be a number`},
		{"key unclosed placeholder", `{"zones":[{"name":"a","key":"{http.request.header.X-Api-Key","limits":[{"events":10,"window":"1m"}]}]}`,
			`zone "a": key: unclosed placeholder "{http.request.header.X-Api-Key"`},
		{"mholt/caddy-ratelimit options", `{"zones":[{"name":"a","limits":[{"events":10,"window":"1m"}]},{"name":"b","key":"{http.request.remote.host}","ipv4_prefix":0,"ipv6_prefix":0,"limits":[{"events":1,"window":"1s"}]}],"jitter":3,"log_keys":true,"disable_metrics":true}`, ""},
		{"key_resolver null", `{"zones":[{"name":"a","key":"{http.request.remote.host}","key_resolver":null,"empty_key":"deny","limits":[{"events":1,"window":"1s"}]}]}`, ""},
		{"events missing", `{"zones":[{"name":"a","key":"k","limits":[{"window":"1s"}]}]}`, "events must be positive, got 0"},
		{"limits empty", `{"zones":[{"name":"a","key":"k","limits":[]}]}`, "no limit"},
		{"zones empty", `{"zones":[]}`, "no zones"},
		{"empty object", `{}`, "no zones"},
		{"duplicate zone names", `{"zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]},{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]}]}`, `duplicate zone name "a"`},
		{"burst above bound", `{"zones":[{"name":"a","key":"k","algorithm":"token_bucket","burst":9007199254740991,"limits":[{"events":7,"window":"8760h"}]}]}`, "burst must be at most 1125899906842624"},
		{"longest window", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1125899906842624,"window":"3650d"}]}]}`, ""},
		{"window above bound", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1,"window":315360000000001000}]}]}`, "limit 1: window must be at most 3650d (about 10 years), got 87600h0m0.000001s"},
		{"window past 2^53 microseconds", `{"zones":[{"name":"a","key":"k","algorithm":"sliding_window","limits":[{"events":1,"window":"104300d"}]}]}`, "window must be at most 3650d"},
		{"events above bound", `{"zones":[{"name":"a","key":"k","limits":[{"events":1125899906842625,"window":"1s"}]}]}`, "limit 1: events must be at most 1125899906842624"},
		{"bucket numbers too large for the algorithm", `{"zones":[{"name":"a","key":"k","algorithm":"token_bucket","burst":1125899906842624,"limits":[{"events":7,"window":"8760h"}]}]}`, "burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			dec := json.NewDecoder(strings.NewReader(tt.json))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil {
				t.Fatalf("decode: %v", err)
			}
			err := h.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate succeeded, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestKeyResolverNull checks that a key_resolver of null, as JSON written
// by hand may have it, is no key_resolver: the zone's key is used.
func TestKeyResolverNull(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"a","key":"{http.request.header.X}","key_resolver":null,"limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate after Provision: %v", err)
	}
	for _, c := range []struct {
		x    string
		want int
	}{{"a", http.StatusOK}, {"a", http.StatusTooManyRequests}, {"b", http.StatusOK}} {
		if got := serve(h, newReq("192.0.2.1:1", header("X", c.x))).code; got != c.want {
			t.Fatalf("X: %s: status %d, want %d", c.x, got, c.want)
		}
	}
}

// TestValidateDoesNotModify checks that Validate leaves the configuration
// alone: defaults are Provision's job.
func TestValidateDoesNotModify(t *testing.T) {
	h := Handler{Zones: []*Zone{validZone("a")}}
	before, _ := json.Marshal(h)
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	after, _ := json.Marshal(h)
	if string(before) != string(after) {
		t.Fatalf("Validate changed the config:\n%s\n%s", before, after)
	}
}

// TestValidateAfterProvision checks that what Provision fills in passes
// Validate, which Caddy runs after Provision: the options refused when
// written (a memory option with store redis, on_error with sync_interval,
// prefixes without a key) have defaults that must not be.
func TestValidateAfterProvision(t *testing.T) {
	for _, cfg := range []string{
		`{"zones":[{"name":"a","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1s"}]}],"jitter":2}`,
		`{"store":"redis","redis":{"addresses":["127.0.0.1:1"]},"zones":[{"name":"a","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"store":"redis","redis":{"addresses":["127.0.0.1:1"]},"sync_interval":"1s","max_keys":10,
			"zones":[{"name":"a","key":"k","algorithm":"fixed_window","limits":[{"events":1,"window":"1s"}]}]}`,
	} {
		h := provision(t, cfg, nil)
		if err := h.Validate(); err != nil {
			t.Errorf("%s: Validate after Provision: %v", cfg, err)
		}
	}
}

// Zones whose tiers would have the same policy name in the RateLimit
// headers are refused: "a-1m" is zone a's tier of 1m.
func TestValidatePolicyNameCollision(t *testing.T) {
	h := Handler{Zones: []*Zone{
		{Name: "a", Key: "k", Limits: []Limit{{Events: 1, Window: caddy.Duration(time.Minute)}, {Events: 5, Window: caddy.Duration(time.Hour)}}},
		{Name: "a-1m", Key: "k", Limits: []Limit{{Events: 1, Window: caddy.Duration(time.Second)}}},
	}}
	err := h.Validate()
	if err == nil || !strings.Contains(err.Error(), `tier named "a-1m"`) {
		t.Fatalf("Validate: %v, want the collision of the policy name a-1m", err)
	}
	h.Zones[1].Name = "a-2m"
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate without a collision: %v", err)
	}
}
