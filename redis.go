package ratelimit

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/keyresolver"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// Defaults of the redis block. Short timeouts: a rate limiter that waits
// seconds for Redis holds every request that long; on_error decides what a
// request gets when Redis does not answer in time.
const (
	defaultRedisAddress = "127.0.0.1:6379"
	defaultKeyPrefix    = "rl:"
	defaultDialTimeout  = time.Second
	defaultReadTimeout  = 250 * time.Millisecond
	defaultWriteTimeout = 250 * time.Millisecond

	// maxPoolSize bounds pool_size: far above any useful pool, low enough
	// that a typo cannot make the client hold a million connections.
	maxPoolSize = 1 << 20
)

// RedisConfig is how the Redis store connects: one node, a Redis Cluster
// (several addresses, or cluster), or a master found through Redis Sentinel.
// Values may hold global placeholders such as {env.REDIS_PASSWORD}, which
// are replaced once at Provision. Handlers whose settings are equal (after
// replacement) share one client, which outlives a config reload.
type RedisConfig struct {
	// Addresses are the host:port of the Redis node, or of some Cluster
	// nodes (seeds) when there are several or Cluster is set; each once.
	// Default: 127.0.0.1:6379 (unless URL or Sentinel is set).
	Addresses []string `json:"addresses,omitempty"`

	// URL is a redis:// or rediss:// URL (user, password, host, port, db
	// and TLS in one string), instead of Addresses. Username and Password
	// override the URL's; DB may not be given in both. It needs a host, and
	// takes no ?options (the other fields are the options).
	URL string `json:"url,omitempty"`

	// Cluster makes a single address a Cluster seed. Several addresses
	// always mean Cluster.
	Cluster bool `json:"cluster,omitempty"`

	// SentinelMaster is the master name watched by the Sentinels at
	// SentinelAddresses; with it, the client follows failovers. Instead of
	// Addresses and URL.
	SentinelMaster string `json:"sentinel_master,omitempty"`

	// SentinelAddresses are the host:port of the Sentinels. Required with
	// SentinelMaster.
	SentinelAddresses []string `json:"sentinel_addresses,omitempty"`

	// Username is the ACL user (Redis 6 and later). Default: none.
	Username string `json:"username,omitempty"`

	// Password authenticates the client (and to the Sentinels). Default:
	// none.
	Password string `json:"password,omitempty"`

	// DB is the database number of a single node or Sentinel master, 0 to
	// 2147483647 (Cluster has only 0). Default: 0.
	DB int `json:"db,omitempty"`

	// TLS, when set, connects over TLS. With URL, only a rediss:// one.
	TLS *RedisTLS `json:"tls,omitempty"`

	// KeyPrefix starts every Redis key of the rate limiter, so that it can
	// share a Redis with other data. It may not contain a brace (the Cluster
	// hash tag). Default: "rl:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// DialTimeout bounds connecting to Redis (nanoseconds in JSON, or a
	// duration string; at least 1ms and at most 1m, as the other
	// timeouts). Default: 1s.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`

	// ReadTimeout bounds waiting for one reply. A decision that takes
	// longer counts as a Redis failure (see on_error). Default: 250ms.
	ReadTimeout caddy.Duration `json:"read_timeout,omitempty"`

	// WriteTimeout bounds sending one command. Default: 250ms.
	WriteTimeout caddy.Duration `json:"write_timeout,omitempty"`

	// PoolSize is the most connections per Redis node, at most 1048576.
	// Default: go-redis's, 10 per CPU.
	PoolSize int `json:"pool_size,omitempty"`
}

// RedisTLS configures TLS to Redis.
type RedisTLS struct {
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`

	// CAFile is a PEM file of the CAs that sign the server's certificate.
	// Default: the system's roots.
	CAFile string `json:"ca_file,omitempty"`

	// ServerName is the name checked in the server's certificate. Default:
	// the host of the address.
	ServerName string `json:"server_name,omitempty"`
}

// validate checks the settings that need no placeholder replacement.
func (rc *RedisConfig) validate() error {
	if rc.URL != "" && len(rc.Addresses) > 0 {
		return conflictErrf([]string{"url", "address"}, "redis: url and address are mutually exclusive")
	}
	if rc.SentinelMaster != "" {
		if rc.URL != "" || len(rc.Addresses) > 0 {
			return conflictErrf([]string{"sentinel", "address", "url"}, "redis: sentinel is an alternative to address and url, not both")
		}
		if len(rc.SentinelAddresses) == 0 {
			return errors.New("redis: sentinel needs the master name and at least one Sentinel address (sentinel <master> <host:port>...)")
		}
		if rc.Cluster {
			return conflictErrf([]string{"sentinel", "cluster"}, "redis: cluster and sentinel are mutually exclusive")
		}
	} else if len(rc.SentinelAddresses) > 0 {
		return errors.New("redis: sentinel addresses without a master name (sentinel <master> <host:port>...)")
	}
	// An error in one option names it (zoneError), so that the Caddyfile
	// reports the line that holds it.
	for option, addrs := range map[string][]string{"address": rc.Addresses, "sentinel": rc.SentinelAddresses} {
		for i, a := range addrs {
			if err := checkHostPort(a); err != nil {
				return &zoneError{option: option, err: err}
			}
			// Two addresses make a Cluster: one given twice would
			// silently turn a single node into one.
			if slices.Contains(addrs[:i], a) {
				return zoneErrf(option, "redis: address %q given twice", a)
			}
		}
	}
	if rc.URL != "" {
		path, err := checkRedisURL(rc.URL)
		if err != nil {
			return &zoneError{option: "url", err: err}
		}
		if path != "" && rc.DB != 0 {
			return conflictErrf([]string{"db", "url"}, "redis: db %d and the url's database %q: give the database once (in the url, or db)", rc.DB, path)
		}
		if rc.Cluster && path != "" && path != "0" {
			return conflictErrf([]string{"url", "cluster"}, "redis: the url's database %q: a Redis Cluster has only database 0", path)
		}
		// The tls options would turn TLS on whatever the scheme says.
		if rc.TLS != nil && len(rc.URL) >= 8 && strings.EqualFold(rc.URL[:8], "redis://") { // schemes are case-insensitive
			return zoneErrf("tls", "redis: tls with a redis:// url: write rediss:// for TLS (tls then sets its options), or leave tls out")
		}
	}
	for _, t := range []struct{ option, name, v string }{{"sentinel", "sentinel master", rc.SentinelMaster}, {"tls", "tls server_name", tlsServerName(rc.TLS)}} {
		if err := keyresolver.CheckTemplate(t.v); err != nil {
			return zoneErrf(t.option, "redis: %s: %v", t.name, err)
		}
	}
	if err := checkDB(rc.DB); err != nil {
		return &zoneError{option: "db", err: err}
	}
	if rc.DB != 0 && (rc.Cluster || len(rc.Addresses) > 1) {
		with := "cluster"
		if !rc.Cluster {
			with = "address" // two addresses make a Cluster
		}
		return conflictErrf([]string{"db", with}, "redis: db %d: a Redis Cluster has only database 0", rc.DB)
	}
	if err := redisstore.CheckKeyPrefix(rc.KeyPrefix); err != nil && !isPlaceholder(rc.KeyPrefix) {
		return zoneErrf("key_prefix", "redis: %v", err)
	}
	for _, t := range []struct {
		name string
		d    caddy.Duration
	}{{"dial_timeout", rc.DialTimeout}, {"read_timeout", rc.ReadTimeout}, {"write_timeout", rc.WriteTimeout}} {
		// 0 is the default; a few nanoseconds would fail every call.
		if d := time.Duration(t.d); d != 0 {
			if err := checkAtLeast(t.name, d, minRedisTimeout); err != nil {
				return &zoneError{option: t.name, err: fmt.Errorf("redis: %v", err), hint: jsonHint(d)}
			}
			if d > maxRedisTimeout {
				return zoneErrf(t.name, "redis: %s must be at most %s (a request waits that long for a hung Redis), got %s", t.name, maxRedisTimeout, d)
			}
		}
	}
	if rc.PoolSize < 0 {
		return zoneErrf("pool_size", "redis: pool_size must be positive, got %d", rc.PoolSize)
	}
	if rc.PoolSize > maxPoolSize {
		return zoneErrf("pool_size", "redis: pool_size must be at most %d, got %d", maxPoolSize, rc.PoolSize)
	}
	return nil
}

func tlsServerName(t *RedisTLS) string {
	if t == nil {
		return ""
	}
	return t.ServerName
}

// checkHostPort accepts host:port with a port from 1 to 65535, and a value
// with placeholders (checked once replaced) whose braces are placeholders.
func checkHostPort(a string) error {
	if strings.ContainsAny(a, "{}") {
		if err := keyresolver.CheckTemplate(a); err != nil {
			return fmt.Errorf("redis: address %q: %v", a, err)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || port == "" || strings.ContainsFunc(host, unicode.IsSpace) {
		return fmt.Errorf("redis: address %q is not host:port", a)
	}
	return checkPort("address", a, port)
}

// checkDB checks a database number: Redis's SELECT takes 0 to 2^31-1.
func checkDB(db int) error {
	switch {
	case db < 0:
		return fmt.Errorf("redis: db must not be negative, got %d", db)
	case db > math.MaxInt32:
		return fmt.Errorf("redis: db must be at most %d, got %d", math.MaxInt32, db)
	}
	return nil
}

func checkPort(what, value, port string) error {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("redis: %s %q: port %q is not a TCP port (1 to 65535)", what, value, port)
	}
	return nil
}

// checkRedisURL checks what of a redis URL go-redis would not refuse
// itself but read as something else: a port out of range. It returns the
// URL's database ("" if none), which db must not override. A URL with
// placeholders is checked once replaced.
func checkRedisURL(v string) (db string, err error) {
	if strings.ContainsAny(v, "{}") {
		if err := keyresolver.CheckTemplate(v); err != nil {
			return "", fmt.Errorf("redis: url: %v", err)
		}
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil {
		// (Not err itself: it quotes the URL, password included.)
		return "", errors.New("redis: url is not a URL: want redis[s]://[user:password@]host:port[/db]")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", fmt.Errorf("redis: url must start with redis:// or rediss://, got %q", u.Redacted())
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if err := checkPort("url", u.Redacted(), p); err != nil {
			return "", err
		}
	}
	// go-redis dials localhost for a URL without a host, and reads
	// options after '?' that the store then replaces with its own.
	if u.Hostname() == "" {
		shown := v // Redacted would drop the empty authority's "//"
		if _, secret := u.User.Password(); secret {
			shown = u.Redacted()
		}
		return "", fmt.Errorf("redis: url %q has no host", shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("redis: url %q: nothing after '?' or '#' is read: give timeouts, pool_size and tls as options of the redis block", u.Redacted())
	}
	// What go-redis itself refuses (a database that is not a number, a
	// longer path), now rather than when the store is set up. Its
	// messages do not hold the password.
	opt, err := redis.ParseURL(v)
	if err != nil {
		return "", fmt.Errorf("redis: url: %s", strings.TrimPrefix(err.Error(), "redis: "))
	}
	if err := checkDB(opt.DB); err != nil {
		return "", err
	}
	return strings.Trim(u.Path, "/"), nil
}

// resolved returns a copy of rc with global placeholders ({env.*}, ...)
// replaced and the defaults filled in.
func (rc *RedisConfig) resolved() (*RedisConfig, error) {
	repl := caddy.NewReplacer()
	r := *rc
	var err error
	one := func(s string) string {
		if err != nil || !strings.Contains(s, "{") {
			return s
		}
		var v string
		v, err = repl.ReplaceOrErr(s, true, true)
		return v
	}
	many := func(in []string) []string {
		if in == nil {
			return nil
		}
		out := make([]string, 0, len(in))
		for _, s := range in {
			// A placeholder may stand for several addresses
			// ({env.REDIS_NODES} = "a:1 b:2").
			out = append(out, strings.Fields(one(s))...)
		}
		return out
	}
	r.Addresses = many(rc.Addresses)
	r.SentinelAddresses = many(rc.SentinelAddresses)
	r.URL = one(rc.URL)
	r.SentinelMaster = one(rc.SentinelMaster)
	r.Username = one(rc.Username)
	r.Password = one(rc.Password)
	r.KeyPrefix = one(rc.KeyPrefix)
	if rc.TLS != nil {
		t := *rc.TLS
		t.CAFile = one(t.CAFile)
		t.ServerName = one(t.ServerName)
		r.TLS = &t
	}
	if err != nil {
		return nil, fmt.Errorf("redis: %v", err)
	}
	if r.URL == "" && r.SentinelMaster == "" && len(r.Addresses) == 0 {
		r.Addresses = []string{defaultRedisAddress}
	}
	if rc.KeyPrefix == "" {
		r.KeyPrefix = defaultKeyPrefix
	}
	if r.DialTimeout == 0 {
		r.DialTimeout = caddy.Duration(defaultDialTimeout)
	}
	if r.ReadTimeout == 0 {
		r.ReadTimeout = caddy.Duration(defaultReadTimeout)
	}
	if r.WriteTimeout == 0 {
		r.WriteTimeout = caddy.Duration(defaultWriteTimeout)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// poolKey identifies the client of rc (resolved) in the reload pool.
func (rc *RedisConfig) poolKey() (redisPoolKey, error) {
	b, err := json.Marshal(rc)
	return redisPoolKey(b), err
}

// redisPoolKey is the pool key of a shared Redis client: its settings as
// JSON.
type redisPoolKey string

// universalOptions translates rc (resolved) to go-redis options;
// redisstore.NewClient adds the client policy the stores rely on.
func (rc *RedisConfig) universalOptions() (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{
		Addrs:            rc.Addresses,
		MasterName:       rc.SentinelMaster,
		Username:         rc.Username,
		Password:         rc.Password,
		SentinelPassword: rc.Password,
		DB:               rc.DB,
		DialTimeout:      time.Duration(rc.DialTimeout),
		ReadTimeout:      time.Duration(rc.ReadTimeout),
		WriteTimeout:     time.Duration(rc.WriteTimeout),
		PoolSize:         rc.PoolSize,
		IsClusterMode:    rc.Cluster || len(rc.Addresses) > 1,
	}
	if rc.SentinelMaster != "" {
		o.Addrs = rc.SentinelAddresses
	}
	if rc.URL != "" {
		u, err := redis.ParseURL(rc.URL)
		if err != nil {
			return nil, fmt.Errorf("redis: url: %v", err)
		}
		o.Addrs = []string{u.Addr}
		o.Username, o.Password, o.DB, o.TLSConfig = u.Username, u.Password, u.DB, u.TLSConfig
		if rc.Username != "" {
			o.Username = rc.Username
		}
		if rc.Password != "" {
			o.Password = rc.Password
		}
		if rc.DB != 0 {
			o.DB = rc.DB
		}
	}
	if rc.TLS != nil {
		tc := o.TLSConfig
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.InsecureSkipVerify = rc.TLS.InsecureSkipVerify
		if rc.TLS.ServerName != "" {
			tc.ServerName = rc.TLS.ServerName
		}
		if rc.TLS.CAFile != "" {
			pem, err := os.ReadFile(rc.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("redis: tls ca_file: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis: tls ca_file %s: no PEM certificate in it", rc.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		o.TLSConfig = tc
	}
	return o, nil
}
