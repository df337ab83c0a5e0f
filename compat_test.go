package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Behaviour of the options of mholt/caddy-ratelimit that this module
// accepts with the same meaning.

// A zone without a key has one count for all its requests.
func TestZoneWithoutKey(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"all","limits":[{"events":2,"window":"1m"}]}]}`, newClock())
	for i, remote := range []string{"192.0.2.1:1", "198.51.100.2:1"} {
		if res := serve(h, newReq(remote)); res.code != 200 {
			t.Fatalf("request %d from %s: %d, want 200", i+1, remote, res.code)
		}
	}
	if res := serve(h, newReq("203.0.113.3:1")); res.code != 429 {
		t.Fatalf("third request, from a third client: %d, want 429 (one count for the zone)", res.code)
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate after Provision: %v", err)
	}
}

// ipv4_prefix 0 and ipv6_prefix 0 mean not set: each address alone.
func TestPrefixZeroIsNotSet(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"p","key":"{http.request.remote.host}","ipv4_prefix":0,"ipv6_prefix":0,
		"limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	for _, c := range []struct{ remote, key string }{
		{"192.0.2.1:1", "192.0.2.1"},
		{"192.0.2.2:1", "192.0.2.2"},
		{"[2001:db8::1]:1", "2001:db8::1"},
		{"[2001:db8::2]:1", "2001:db8::2"},
	} {
		res := serve(h, newReq(c.remote))
		if res.code != 200 {
			t.Fatalf("%s: %d, want 200 (an address of its own)", c.remote, res.code)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.key}", ""); got != c.key {
			t.Errorf("%s: key %q, want %q", c.remote, got, c.key)
		}
	}
}

// A jitter above 1 adds up to that multiple of the wait to Retry-After,
// never less than the wait.
func TestJitterAboveOne(t *testing.T) {
	h := provision(t, `{"jitter":3,"zones":[{"name":"j","key":"k","limits":[{"events":1,"window":"10s"}]}]}`, newClock())
	serve(h, newReq("192.0.2.1:1"))
	most := 0
	for i := 0; i < 200; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		n, err := strconv.Atoi(res.hdr.Get("Retry-After"))
		if err != nil || n < 10 || n > 40 {
			t.Fatalf("Retry-After %q out of [10, 40]", res.hdr.Get("Retry-After"))
		}
		most = max(most, n)
	}
	// 200 draws all at most 20s (what jitter 1 allows) has probability
	// (1/3)^200.
	if most <= 20 {
		t.Errorf("jitter 3: longest Retry-After %ds, want some above 20s", most)
	}
}

// A jitter so large that the wait plus jitter overflows saturates
// Retry-After: it is neither dropped nor wrapped around to a short one.
func TestRetryAfterHugeJitter(t *testing.T) {
	for _, d := range []time.Duration{time.Second, time.Hour, math.MaxInt64 / 2} {
		for _, j := range []float64{1e31, 1e300, math.MaxFloat64} {
			// The random fraction would have to be below 1e-21 for
			// the jitter to fit, and rand.Float64's smallest one
			// above 0 is 2^-53: the result is the saturated one.
			// (With 1e12, a fraction below 0.009 fits 1s's jitter.)
			if got, want := retryAfterSeconds(d, j), ceilSeconds(math.MaxInt64); got != want {
				t.Errorf("retryAfterSeconds(%s, %g) = %d, want %d (saturated)", d, j, got, want)
			}
		}
	}
}

// disable_metrics keeps a handler's zones out of the config's metrics; the
// other handlers are reported as before.
func TestDisableMetrics(t *testing.T) {
	hs, reg := provisionCtx(t,
		`{"disable_metrics":true,"zones":[{"name":"off","key":"k","limits":[{"events":1,"window":"1m"}]}]}`,
		`{"zones":[{"name":"on","key":"k","limits":[{"events":1,"window":"1m"}]}]}`)
	for _, h := range hs {
		serve(h, newReq("192.0.2.1:1"))
		serve(h, newReq("192.0.2.1:1"))
	}
	if v, ok := metricValue(t, reg, "caddy_http_rate_limit_requests_total", "zone=on", "result=denied"); !ok || v != 1 {
		t.Errorf("zone on: denied = %v (found %v), want 1", v, ok)
	}
	for _, name := range []string{"caddy_http_rate_limit_requests_total", "caddy_http_rate_limit_keys"} {
		if v, ok := metricValue(t, reg, name, "zone=off"); ok {
			t.Errorf("zone off (disable_metrics): %s reported (%v)", name, v)
		}
	}
	if v, _ := metricValue(t, reg, "caddy_http_rate_limit_decision_seconds", "store=memory"); v != 2 {
		t.Errorf("decision_seconds count = %v, want 2 (the zone on only)", v)
	}
}

// A rejection that handle_errors renders reads as mholt/caddy-ratelimit's
// (caddyhttp.Error(429, nil)): {err.message} is the status text, so an
// error page that shows it says the same to clients; the zone that refused
// is in {http.rate_limit.exceeded.name}.
func TestRejectionErrorMessage(t *testing.T) {
	for _, status := range []int{429, 503} {
		h := provision(t, `{"status":`+strconv.Itoa(status)+`,"zones":[{"name":"m","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
		h.rt.errorRoutes = errorRoutesYes
		serve(h, newReq("192.0.2.1:1"))
		r := newReq("192.0.2.1:1")
		res := serve(h, r)
		if res.err == nil {
			t.Fatalf("status %d: no error for handle_errors (code %d)", status, res.code)
		}
		repl := res.repl
		(*caddyhttp.HTTPErrorConfig)(nil).WithError(r, res.err)
		for ph, want := range map[string]string{
			"{http.error.status_code}":        strconv.Itoa(status),
			"{http.error.message}":            http.StatusText(status),
			"{http.rate_limit.exceeded.name}": "m",
		} {
			if got := repl.ReplaceAll(ph, ""); got != want {
				t.Errorf("status %d: %s = %q, want %q", status, ph, got, want)
			}
		}
	}
}
