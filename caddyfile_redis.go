package ratelimit

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

var redisSubdirectives = []string{"address", "url", "sentinel", "cluster", "username", "password", "db", "tls", "key_prefix", "dial_timeout", "read_timeout", "write_timeout", "pool_size"}

// unmarshalRedis parses a redis block, the cursor on its "redis" token:
//
//	redis {
//	    address  <host:port>...
//	    url      redis[s]://[user:password@]host:port[/db]
//	    sentinel <master> <host:port>...
//	    cluster
//	    username <name>
//	    password <password>
//	    db       <n>
//	    tls      [insecure_skip_verify] [ca_file <path>] [server_name <name>]
//	    key_prefix    <prefix>
//	    dial_timeout  <duration>
//	    read_timeout  <duration>
//	    write_timeout <duration>
//	    pool_size     <n>
//	}
//
// "redis <host:port>..." on one line is short for a block with address.
func unmarshalRedis(d *caddyfile.Dispenser) (_ *RedisConfig, err error) {
	defer func() { err = prefixed(err, "redis: ") }()
	rc := new(RedisConfig)
	blockTok := d.Token()
	rc.Addresses = d.RemainingArgs()
	seen := make(map[string]int)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if line, dup := seen[sub]; dup {
			return nil, d.Errf("redis: %s already specified (at line %d)", sub, line)
		}
		seen[sub] = d.Line()
		switch sub {
		case "address":
			if len(rc.Addresses) > 0 {
				return nil, d.Errf("redis: address given twice (also on the redis line)")
			}
			rc.Addresses = d.RemainingArgs()
			if len(rc.Addresses) == 0 {
				return nil, d.Errf("redis: address takes one or more <host:port> (several: a Redis Cluster)")
			}
		case "url":
			v, err := oneArg(d, "url", "redis[s]://[user:password@]host:port[/db]")
			if err != nil {
				return nil, err
			}
			rc.URL = v
		case "sentinel":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return nil, d.Errf("redis: sentinel takes the master name and one or more Sentinel addresses (sentinel <master> <host:port>...), got %d arguments", len(args))
			}
			rc.SentinelMaster, rc.SentinelAddresses = args[0], args[1:]
		case "cluster":
			if err := noArgs(d, "cluster"); err != nil {
				return nil, err
			}
			rc.Cluster = true
		case "username", "password", "key_prefix":
			v, err := oneArg(d, sub, "<value>")
			if err != nil {
				return nil, err
			}
			switch sub {
			case "username":
				rc.Username = v
			case "password":
				rc.Password = v
			default:
				rc.KeyPrefix = v
			}
		case "db":
			v, err := oneArg(d, "db", "<n>")
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, d.Errf("redis: db must be a database number (0 or more), got %q", v)
			}
			if err := checkJSONNumber("db", v, int64(n)); err != nil {
				return nil, d.WrapErr(err)
			}
			rc.DB = n
		case "tls":
			t := new(RedisTLS)
			args := d.RemainingArgs()
			given := make(map[string]bool)
			for i := 0; i < len(args); i++ {
				if given[args[i]] {
					return nil, d.Errf("redis: tls %s given twice", args[i])
				}
				given[args[i]] = true
				switch args[i] {
				case "insecure_skip_verify":
					t.InsecureSkipVerify = true
				case "ca_file", "server_name":
					if i+1 >= len(args) {
						return nil, d.Errf("redis: tls %s takes a value", args[i])
					}
					if args[i+1] == "" {
						return nil, d.Errf("redis: %v", errEmpty("tls "+args[i]))
					}
					if args[i] == "ca_file" {
						t.CAFile = args[i+1]
					} else {
						t.ServerName = args[i+1]
					}
					i++
				default:
					return nil, d.Errf("redis: unknown tls option %q (want insecure_skip_verify, ca_file <path>, server_name <name>)", args[i])
				}
			}
			if err := noBlock(d, "tls"); err != nil {
				return nil, err
			}
			rc.TLS = t
		case "dial_timeout", "read_timeout", "write_timeout":
			dur, err := durationArg(d, sub)
			if err != nil {
				return nil, err
			}
			if dur == 0 {
				// JSON's 0 is the default; written out, it would fail
				// every call.
				return nil, d.Errf("redis: %v", checkAtLeast(sub, dur, minRedisTimeout))
			}
			v := caddy.Duration(dur)
			switch sub {
			case "dial_timeout":
				rc.DialTimeout = v
			case "read_timeout":
				rc.ReadTimeout = v
			default:
				rc.WriteTimeout = v
			}
		case "pool_size":
			n, err := positiveIntArg(d, "pool_size")
			if err != nil {
				return nil, err
			}
			rc.PoolSize = int(n)
		default:
			return nil, d.Errf("redis: unknown subdirective %q (want one of %s)%s", sub, strings.Join(redisSubdirectives, ", "), elsewhere(sub))
		}
	}
	// The checks are validate's: an error in one option is reported at
	// that option's line, else at the redis line.
	if err := rc.validate(); err != nil {
		return nil, errAtOption(blockTok, seen, err)
	}
	return rc, nil
}

// isPlaceholder reports whether v is one placeholder, e.g. {env.PREFIX}.
func isPlaceholder(v string) bool {
	return strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") && strings.Count(v, "{") == 1 && strings.Count(v, "}") == 1
}
