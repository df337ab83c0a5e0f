package ratelimit

import (
	"fmt"
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

// mholtTimeline is a zone in mholt/caddy-ratelimit's JSON shape: ten GETs
// per minute for everyone.
const mholtTimeline = `{"rate_limits":{"zone1":{"match":[{"method":["GET"]}],"key":"static","window":"60s","max_events":10}}}`

// expectAdmitted serves n requests of one client through h and fails the
// test unless each is admitted.
func expectAdmitted(t *testing.T, h *Handler, n int, what string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("%s, request %d: %d", what, i+1, res.code)
		}
	}
}

// expectDenied fails the test unless res is a 429 with Retry-After want.
func expectDenied(t *testing.T, res result, want string, what string) {
	t.Helper()
	if res.code != 429 || res.called || res.hdr.Get("Retry-After") != want {
		t.Fatalf("%s: code %d (next called %v), Retry-After %q; want 429 with %s", what, res.code, res.called, res.hdr.Get("Retry-After"), want)
	}
}

// The window's timeline as mholt/caddy-ratelimit has it: the request past
// the limit waits the whole window, half a window later half of it, and a
// window after the first requests they have all left it (the instant a
// request is a window old, it no longer counts). Requests the zone does
// not match pass.
func TestMholtWindowTimeline(t *testing.T) {
	clock := newClock()
	h := provision(t, mholtTimeline, clock)
	expectAdmitted(t, h, 10, "the first ten")
	expectDenied(t, serve(h, newReq("192.0.2.2:1")), "60", "11th GET")
	post := newReq("192.0.2.1:1")
	post.Method = "POST"
	if res := serve(h, post); res.code != 200 {
		t.Fatalf("POST (not matched): %d", res.code)
	}
	clock.Advance(30 * time.Second)
	expectDenied(t, serve(h, newReq("192.0.2.1:1")), "30", "half a window later")
	clock.Advance(30 * time.Second)
	expectAdmitted(t, h, 10, "a window later")
	expectDenied(t, serve(h, newReq("192.0.2.1:1")), "60", "a window later, 11th GET")
}

// Requests spread over the window leave it one by one, as from
// mholt/caddy-ratelimit's ring buffer: ten requests a second apart in a
// 10s window; at the last, the next may come a second later; five seconds
// after, the six requests at least a window old have left (the sixth
// exactly a window old).
func TestMholtSpreadRequestsLeave(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"rate_limits":{"ring":{"key":"static","window":"10s","max_events":10}}}`, clock)
	for i := 0; i < 10; i++ {
		if i > 0 {
			clock.Advance(time.Second)
		}
		expectAdmitted(t, h, 1, fmt.Sprintf("at %ds", i))
	}
	expectDenied(t, serve(h, newReq("192.0.2.1:1")), "1", "a full window")
	clock.Advance(6 * time.Second)
	expectAdmitted(t, h, 6, "6s later")
	expectDenied(t, serve(h, newReq("192.0.2.1:1")), "1", "6s later, the 7th")
}

// ipv4_prefix and ipv6_prefix group addresses as mholt/caddy-ratelimit
// does: two addresses share a count exactly when there they share a key.
// The key's text differs only for a full-length prefix set explicitly
// (there "172.16.5.4/32", here the address alone, as without a prefix).
func TestMholtNetworkPrefixes(t *testing.T) {
	for _, c := range []struct {
		v4, v6   int
		a, b     string
		together bool
		key      string // the key of a here
	}{
		{0, 64, "2001:db8:1234:5678:9abc:def0:1234:5678", "2001:db8:1234:5678:ffff:ffff:ffff:ffff", true, "2001:db8:1234:5678::/64"},
		{0, 64, "2001:db8:1234:5678::1", "2001:db8:1234:5679::1", false, "2001:db8:1234:5678::/64"},
		{0, 48, "2001:db8:1234:5678::1", "2001:db8:1234:ffff::2", true, "2001:db8:1234::/48"},
		{0, 128, "2001:db8:1234:5678::1", "2001:db8:1234:5678::2", false, "2001:db8:1234:5678::1"},
		{24, 0, "192.168.1.100", "192.168.1.7", true, "192.168.1.0/24"},
		{8, 0, "10.0.0.50", "10.255.1.1", true, "10.0.0.0/8"},
		{32, 0, "172.16.5.4", "172.16.5.5", false, "172.16.5.4"},
		{24, 64, "2001:db8::1", "2001:db8::ffff:1", true, "2001:db8::/64"},
		{24, 64, "192.168.1.100", "192.168.1.200", true, "192.168.1.0/24"},
		{0, 64, "192.168.1.100", "192.168.1.101", false, "192.168.1.100"},
		{24, 0, "2001:db8::1", "2001:db8::2", false, "2001:db8::1"},
		{0, 0, "192.168.1.100", "192.168.1.101", false, "192.168.1.100"},
	} {
		h := provision(t, fmt.Sprintf(`{"rate_limits":{"p":{"key":"{http.request.header.X-Addr}","window":"1m","max_events":1,"ipv4_prefix":%d,"ipv6_prefix":%d}}}`, c.v4, c.v6), newClock())
		res := serve(h, newReq("198.51.100.1:1", header("X-Addr", c.a)))
		if res.code != 200 {
			t.Fatalf("%+v: first: %d", c, res.code)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.key}", ""); got != c.key {
			t.Errorf("%+v: key %q, want %q", c, got, c.key)
		}
		if res := serve(h, newReq("198.51.100.1:1", header("X-Addr", c.b))); (res.code == 429) != c.together {
			t.Errorf("%+v: %s after %s: %d, want one count: %v", c, c.b, c.a, res.code, c.together)
		}
	}
}

// mholt/caddy-ratelimit's concurrency zones (max_concurrent instead of
// window and max_events): at most that many requests of a key in flight; a
// request that ends gives its slot back; keys count apart.
func TestMholtMaxConcurrent(t *testing.T) {
	h := provision(t, `{"rate_limits":{"cc":{"key":"{http.request.uri.path}","max_concurrent":2}}}`, newClock())
	if z := h.Zones[0]; z.Algorithm != "concurrency" || len(z.Limits) != 1 || z.Limits[0].Events != 2 ||
		time.Duration(z.Limits[0].Window) != mholtLeaseWindow {
		t.Fatalf("converted to %+v", z)
	}
	first := serveHeld(h, newReq("192.0.2.1:1", path("/a")))
	second := serveHeld(h, newReq("192.0.2.1:1", path("/a")))
	res := serve(h, newReq("192.0.2.1:1", path("/a")))
	if res.code != 429 || res.called {
		t.Fatalf("third in flight: %d", res.code)
	}
	if res.hdr.Get("Retry-After") != "1" {
		t.Errorf("third in flight: Retry-After %q, want 1 (a slot frees at any time)", res.hdr.Get("Retry-After"))
	}
	other := serveHeld(h, newReq("192.0.2.1:1", path("/b")))
	if res := first(); res.code != 200 {
		t.Fatalf("first: %d", res.code)
	}
	third := serveHeld(h, newReq("192.0.2.1:1", path("/a")))
	if res := serve(h, newReq("192.0.2.1:1", path("/a"))); res.code != 429 {
		t.Fatalf("again two in flight: %d", res.code)
	}
	for _, release := range []func() result{second, third, other} {
		if res := release(); res.code != 200 {
			t.Fatalf("release: %d", res.code)
		}
	}
	if res := serve(h, newReq("192.0.2.1:1", path("/a"))); res.code != 200 {
		t.Fatalf("all ended: %d", res.code)
	}
}

// A concurrency zone beside a window zone (mholt/caddy-ratelimit's mixed
// zones): a request the window zone denies gives its slot back, and the
// window zone still denies once the slot is free.
func TestMholtMaxConcurrentMixed(t *testing.T) {
	h := provision(t, `{"rate_limits":{
		"concurrency_zone":{"key":"static","max_concurrent":1},
		"window_zone":{"key":"static","window":"10s","max_events":1}}}`, newClock())
	held := serveHeld(h, newReq("192.0.2.1:1"))
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", "") != "concurrency_zone" {
		t.Fatalf("second in flight: %d by %q", res.code, res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""))
	}
	if res := held(); res.code != 200 {
		t.Fatalf("first: %d", res.code)
	}
	for i := 0; i < 2; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		expectDenied(t, res, "10", "after the first ended")
		if name := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); name != "window_zone" {
			t.Fatalf("denied by %q, want window_zone (the slot given back)", name)
		}
	}
}
