package ratelimit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// mholtConfig is a handler in mholt/caddy-ratelimit's JSON shape (the
// example of its README, with its other handler options), without the
// "handler" key, which Caddy takes out before decoding.
const mholtConfig = `{
	"rate_limits": {
		"static_example": {
			"match": [{"method": ["GET"]}],
			"key": "static",
			"window": "1m",
			"max_events": 2
		},
		"dynamic_example": {
			"key": "{http.request.remote.host}",
			"window": "5s",
			"max_events": 1
		}
	},
	"jitter": 0.2,
	"sweep_interval": "30s",
	"log_key": true
}`

func TestMholtJSON(t *testing.T) {
	// Caddy decodes module configs strictly: every field is known.
	dec := json.NewDecoder(bytes.NewReader([]byte(mholtConfig)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(Handler)); err != nil {
		t.Fatalf("strict decoding: %v", err)
	}

	h := provision(t, mholtConfig, newClock())
	if len(h.Zones) != 2 || h.Zones[0].Name != "dynamic_example" || h.Zones[1].Name != "static_example" {
		t.Fatalf("zones %+v, want dynamic_example then static_example", h.Zones)
	}
	z := h.Zones[1]
	if z.Algorithm != "sliding_log" || z.Key != "static" || len(z.Limits) != 1 ||
		z.Limits[0].Events != 2 || time.Duration(z.Limits[0].Window) != time.Minute || len(h.rt.zones[1].matchers) != 1 {
		t.Fatalf("static_example converted to %+v", z)
	}
	if !h.LogKeys || h.Jitter != 0.2 || time.Duration(h.SweepInterval) != 30*time.Second || h.RateLimits != nil {
		t.Fatalf("handler options: log_keys %v, jitter %v, sweep_interval %v, rate_limits %v", h.LogKeys, h.Jitter, h.SweepInterval, h.RateLimits)
	}

	// static_example: 2 GETs per minute for everyone; dynamic_example: 1
	// request per 5s per address.
	for i, ip := range []string{"192.0.2.1:1", "192.0.2.2:1"} {
		if res := serve(h, newReq(ip)); res.code != 200 {
			t.Fatalf("GET %d: %d", i+1, res.code)
		}
	}
	res := serve(h, newReq("192.0.2.3:1"))
	if res.code != 429 || res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", "") != "static_example" {
		t.Fatalf("third GET: %d by %q, want 429 by static_example", res.code, res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""))
	}
	post := newReq("192.0.2.4:1")
	post.Method = "POST"
	if res := serve(h, post); res.code != 200 {
		t.Fatalf("POST (not in static_example): %d", res.code)
	}
	post = newReq("192.0.2.4:1")
	post.Method = "POST"
	if res := serve(h, post); res.code != 429 || res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", "") != "dynamic_example" {
		t.Fatalf("second POST of one address: %d, want 429 by dynamic_example", res.code)
	}
}

func TestMholtJSONRefused(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{`{"rate_limits":{"a":{"key":"k","window":"1m","max_events":1}},"distributed":{}}`,
			"distributed (from mholt/caddy-ratelimit) is not supported: use store redis"},
		{`{"rate_limits":{"a":{"key":"k","window":"1m","max_events":1}},"distributed":{"read_interval":"5s","write_interval":"5s"}}`,
			"distributed (from mholt/caddy-ratelimit) is not supported"},
		{`{"rate_limits":{"a":{"key":"k","window":"1m","max_events":1}},"storage":{"module":"file_system","root":"/tmp"}}`,
			"storage (from mholt/caddy-ratelimit) is not supported"},
		{`{"rate_limits":{"a":{"key":"k","window":"1m","max_events":0}}}`, `zone "a"`},
		{`{"rate_limits":{"a":{"key":"k","max_events":1}}}`, `zone "a"`},
		{`{"rate_limits":{"a":null}}`, `zone "a" is empty`},
		// A prefix with a static key had no effect there.
		{`{"rate_limits":{"a":{"key":"static","window":"1m","max_events":1,"ipv6_prefix":64}}}`, `static key "static"`},
		{`{"rate_limits":{"a":{"key":"k","max_concurrent":1,"max_events":1}}}`, `zone "a": max_concurrent cannot be used with window and max_events`},
		{`{"rate_limits":{"a":{"key":"k","max_concurrent":1,"window":"1m"}}}`, `zone "a": max_concurrent cannot be used with window and max_events`},
		{`{"rate_limits":{"a":{"key":"k","max_concurrent":-1}}}`, `zone "a": max_concurrent must be positive, got -1`},
		{`{"zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1m"}]}],"rate_limits":{"a":{"key":"k","window":"1m","max_events":1}}}`,
			`duplicate zone name "a"`},
	} {
		expectProvisionErr(t, c.config, c.want)
	}
	// distributed null is mholt's "off".
	provision(t, `{"rate_limits":{"a":{"key":"k","window":"1m","max_events":1}},"distributed":null}`, nil)
}

// A concurrency zone of mholt/caddy-ratelimit's JSON decodes strictly, as
// Caddy decodes it.
func TestMholtJSONMaxConcurrentStrict(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"rate_limits":{"c":{"match":[{"method":["GET"]}],"key":"{http.request.remote.host}","max_concurrent":5}}}`))
	dec.DisallowUnknownFields()
	var h Handler
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	if rl := h.RateLimits["c"]; rl == nil || rl.MaxConcurrent != 5 {
		t.Fatalf("decoded %+v", h.RateLimits["c"])
	}
}
