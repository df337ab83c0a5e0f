package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// adminSetup provisions the handlers given as JSON in one config load,
// on clock, and the admin router of that load.
func adminSetup(t *testing.T, clock *testClock, configs ...string) (*AdminAPI, []*Handler) {
	t.Helper()
	ctx := testContext(t)
	hs := provisionLoad(t, ctx, clock, configs...)
	a := new(AdminAPI)
	if err := a.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return a, hs
}

// provisionLoad provisions the handlers given as JSON in ctx (one config
// load), with clock (if not nil) as their clock, and cleans them up at the
// end of the test.
func provisionLoad(t *testing.T, ctx caddy.Context, clock *testClock, configs ...string) []*Handler {
	t.Helper()
	var hs []*Handler
	for _, config := range configs {
		h := new(Handler)
		if err := json.Unmarshal([]byte(config), h); err != nil {
			t.Fatal(err)
		}
		if err := provisionOn(ctx, h, clock); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Cleanup() })
		hs = append(hs, h)
	}
	return hs
}

// adminCall runs one request through the router as Caddy's admin endpoint
// does: an error is answered with its status and message.
func adminCall(t *testing.T, a *AdminAPI, method, path, body string) (int, string) {
	t.Helper()
	routes := a.Routes()
	if len(routes) != 1 || !strings.HasPrefix(path, routes[0].Pattern) {
		t.Fatalf("%s is not routed to the API: %+v", path, routes)
	}
	r := httptest.NewRequest(method, "http://localhost:2019"+path, strings.NewReader(body))
	w := httptest.NewRecorder()
	if err := routes[0].Handler.ServeHTTP(w, r); err != nil {
		var ae caddy.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%s %s: error %v is not an APIError", method, path, err)
		}
		return ae.HTTPStatus, ae.Error()
	}
	return w.Code, w.Body.String()
}

func decodeAs[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("answer %q: %v", s, err)
	}
	return v
}

func TestAdminZones(t *testing.T) {
	const api = `{"zones": [{"name": "api", "key": "{http.request.header.X-Key}", "limits": [{"events": 2, "window": 60000000000}, {"events": 10, "window": 3600000000000}]}]}`
	const shared = `{"zones": [{"name": "api", "key": "{http.request.header.X-Key}", "limits": [{"events": 2, "window": 60000000000}, {"events": 10, "window": 3600000000000}]},
		{"name": "login", "algorithm": "token_bucket", "limits": [{"events": 5, "window": 1000000000}]}]}`
	clock := newClock()
	a, hs := adminSetup(t, clock, api, shared)
	serve(hs[0], newReq("192.0.2.1:1", header("X-Key", "a")))
	serve(hs[0], newReq("192.0.2.1:1", header("X-Key", "b")))

	code, body := adminCall(t, a, "GET", "/rate_limit/zones", "")
	if code != 200 {
		t.Fatalf("GET zones: %d %s", code, body)
	}
	zs := decodeAs[adminZones](t, body)
	if len(zs.Zones) != 2 {
		t.Fatalf("zones %+v, want api (named by both handlers, once) and login", zs)
	}
	z := zs.Zones[0]
	if z.Name != "api" || z.Store != "memory" || z.Algorithm != "sliding_log" || len(z.Tiers) != 2 ||
		z.Tiers[1] != (adminTier{Events: 10, Window: "1h0m0s"}) || z.Keys == nil || *z.Keys != 2 {
		t.Errorf("zone api: %+v", z)
	}
	if z := zs.Zones[1]; z.Name != "login" || z.Algorithm != "token_bucket" || z.Keys == nil || *z.Keys != 0 {
		t.Errorf("zone login: %+v", z)
	}

	if code, body := adminCall(t, a, "POST", "/rate_limit/zones", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST zones: %d %s, want 405", code, body)
	}
	// A 405 names the methods allowed (RFC 9110).
	w := httptest.NewRecorder()
	a.Routes()[0].Handler.ServeHTTP(w, httptest.NewRequest("PUT", "http://localhost:2019/rate_limit/zones/api/keys/k/block", nil))
	if got := w.Header().Get("Allow"); got != "POST, DELETE" {
		t.Errorf("405 of PUT .../block: Allow %q, want \"POST, DELETE\"", got)
	}
	if code, body := adminCall(t, a, "GET", "/rate_limit/other", ""); code != http.StatusNotFound {
		t.Errorf("GET other: %d %s, want 404", code, body)
	}

	// Another load without rate_limit handlers has no zones.
	other := new(AdminAPI)
	if err := other.Provision(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if code, body := adminCall(t, other, "GET", "/rate_limit/zones", ""); code != 200 || decodeAs[adminZones](t, body).Zones == nil ||
		len(decodeAs[adminZones](t, body).Zones) != 0 {
		t.Errorf("GET zones of a load without zones: %d %s", code, body)
	}
}

// TestAdminKey limits a key to 429, then inspects and resets it through
// the API; the key holds '/', ':' and a space, escaped in the path.
func TestAdminKey(t *testing.T) {
	clock := newClock()
	a, hs := adminSetup(t, clock, `{"zones": [{"name": "api", "key": "{http.request.header.X-Key}",
		"limits": [{"events": 2, "window": 60000000000}, {"events": 10, "window": 3600000000000}]}]}`)
	h := hs[0]
	const key = "team/a: b"
	const path = "/rate_limit/zones/api/keys/team%2Fa:%20b"
	for i := range 2 {
		if res := serve(h, newReq("192.0.2.1:1", header("X-Key", key))); res.code != 200 {
			t.Fatalf("request %d: %d", i+1, res.code)
		}
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", key))); res.code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", res.code)
	}
	clock.Advance(10 * time.Second)

	code, body := adminCall(t, a, "GET", path, "")
	if code != 200 {
		t.Fatalf("GET key: %d %s", code, body)
	}
	k := decodeAs[adminKey](t, body)
	want := []adminTierState{
		{Limit: 2, Window: "1m0s", Used: 2, Remaining: 0, ResetAfter: "50s"},
		{Limit: 10, Window: "1h0m0s", Used: 2, Remaining: 8, ResetAfter: "59m50s"},
	}
	if k.Zone != "api" || k.Key != key || len(k.Tiers) != 2 || k.Tiers[0] != want[0] || k.Tiers[1] != want[1] || k.BlockedUntil != nil {
		t.Fatalf("GET key: %+v, want tiers %+v", k, want)
	}
	// Looking consumes nothing.
	if _, body := adminCall(t, a, "GET", path, ""); decodeAs[adminKey](t, body).Tiers[1].Used != 2 {
		t.Fatalf("second GET: %s", body)
	}

	if code, body := adminCall(t, a, "DELETE", path, ""); code != 200 {
		t.Fatalf("DELETE key: %d %s", code, body)
	}
	if _, body := adminCall(t, a, "GET", path, ""); decodeAs[adminKey](t, body).Tiers[0].Used != 0 {
		t.Fatalf("GET after DELETE: %s", body)
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", key))); res.code != 200 {
		t.Fatalf("request after reset: %d, want 200", res.code)
	}
}

// TestAdminKeyForm: the key typed is turned into the zone's key as the
// handler forms it: an address grouped by the prefix, a long key hashed.
func TestAdminKeyForm(t *testing.T) {
	clock := newClock()
	a, hs := adminSetup(t, clock, `{"zones": [{"name": "ip", "key": "{http.request.remote.host}", "ipv4_prefix": 24, "limits": [{"events": 5, "window": 60000000000}]}]}`,
		`{"zones": [{"name": "hdr", "key": "{http.request.header.X-Key}", "limits": [{"events": 5, "window": 60000000000}]}]}`)
	serve(hs[0], newReq("203.0.113.7:1234"))
	long := strings.Repeat("x", 300)
	serve(hs[1], newReq("192.0.2.1:1", header("X-Key", long)))

	for _, c := range []struct{ path, key string }{
		{"/rate_limit/zones/ip/keys/203.0.113.99", "203.0.113.0/24"},
		{"/rate_limit/zones/ip/keys/203.0.113.0%2F24", "203.0.113.0/24"},
		{"/rate_limit/zones/hdr/keys/" + long, hashKey(long)},
		{"/rate_limit/zones/hdr/keys/" + hashKey(long), hashKey(long)},
	} {
		code, body := adminCall(t, a, "GET", c.path, "")
		k := decodeAs[adminKey](t, body)
		if code != 200 || k.Key != c.key || k.Tiers[0].Used != 1 {
			t.Errorf("GET %.60s: %d %+v, want key %q with 1 used", c.path, code, k, c.key)
		}
	}
}

func TestAdminBadInput(t *testing.T) {
	a, _ := adminSetup(t, newClock(), `{"zones": [{"name": "api", "limits": [{"events": 5, "window": 60000000000}]}]}`)
	for _, c := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"GET", "/rate_limit/zones/nope/keys/k", "", 404, `unknown zone "nope"`},
		{"GET", "/rate_limit/zones/api/keys/", "", 400, "empty key"},
		{"GET", "/rate_limit/zones/api", "", 404, "not found"},
		{"GET", "/rate_limit/zones/api/keys/k/other", "", 404, "not found"},
		{"PUT", "/rate_limit/zones/api/keys/k", "", 405, "PUT"},
		{"GET", "/rate_limit/zones/api/keys/k/block", "", 405, "GET"},
		{"POST", "/rate_limit/zones/api/keys/k/block", `{"duration": "soon"}`, 400, "body"},
		{"POST", "/rate_limit/zones/api/keys/k/block", `{"duration": "-1h"}`, 400, "positive"},
		{"POST", "/rate_limit/zones/api/keys/k/block", ``, 400, "body"},
	} {
		code, body := adminCall(t, a, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("%s %s %s: %d %q, want %d and %q", c.method, c.path, c.body, code, body, c.code, c.msg)
		}
	}
}

// TestAdminBlock: POST .../block refuses the key from then on, GET shows
// until when, DELETE .../block lets it through again.
func TestAdminBlock(t *testing.T) {
	clock := newClock()
	a, hs := adminSetup(t, clock, `{"zones": [{"name": "api", "key": "{http.request.remote.host}", "limits": [{"events": 5, "window": 60000000000}]}]}`)
	const path = "/rate_limit/zones/api/keys/192.0.2.1"
	req := func() result { return serve(hs[0], newReq("192.0.2.1:1")) }
	if res := req(); res.code != 200 {
		t.Fatalf("request before the block: %d", res.code)
	}
	code, body := adminCall(t, a, "POST", path+"/block", `{"duration": "1h"}`)
	until := clock.Now().Add(time.Hour)
	if k := decodeAs[adminKey](t, body); code != 200 || k.BlockedUntil == nil || !k.BlockedUntil.Equal(until) {
		t.Fatalf("POST block: %d %s, want blocked until %s", code, body, until)
	}
	clock.Advance(10 * time.Minute)
	if res := req(); res.code != http.StatusTooManyRequests || res.hdr.Get("Retry-After") != "3000" {
		t.Fatalf("request while blocked: %d, Retry-After %q, want 429 and 3000", res.code, res.hdr.Get("Retry-After"))
	}
	if _, body := adminCall(t, a, "GET", path, ""); decodeAs[adminKey](t, body).BlockedUntil == nil {
		t.Fatalf("GET while blocked: %s, want blocked_until", body)
	}
	if code, body := adminCall(t, a, "DELETE", path+"/block", ""); code != 200 {
		t.Fatalf("DELETE block: %d %s", code, body)
	}
	if _, body := adminCall(t, a, "GET", path, ""); decodeAs[adminKey](t, body).BlockedUntil != nil {
		t.Fatalf("GET after the unblock: %s", body)
	}
	if res := req(); res.code != 200 {
		t.Fatalf("request after the unblock: %d", res.code)
	}
}

// TestAdminRunningLoad: the router answers for the config load Caddy runs,
// not for the load it was provisioned with. Caddy starts the admin endpoint
// of a new load before provisioning its handlers, so during a reload the
// old config runs under the new router, and it keeps running when the new
// load fails.
func TestAdminRunningLoad(t *testing.T) {
	const api = `{"zones": [{"name": "api", "key": "{http.request.remote.host}", "limits": [{"events": 5, "window": 60000000000}]}]}`
	const conflicting = `{"zones": [{"name": "api", "key": "{http.request.remote.host}", "limits": [{"events": 6, "window": 60000000000}]}]}`
	clock := newClock()
	running := testContext(t)
	hs := provisionLoad(t, running, clock, api)
	serve(hs[0], newReq("192.0.2.1:1"))

	// The reload: its router, then its handlers, the second of which
	// fails; Caddy then cleans up what it provisioned.
	failed := testContext(t)
	a := new(AdminAPI)
	if err := a.Provision(failed); err != nil {
		t.Fatal(err)
	}
	active := running.GetMetricsRegistry()
	a.active = func() *prometheus.Registry { return active }
	first := provisionLoad(t, failed, clock, api)[0]
	zonesNamed := func(what, want string) {
		t.Helper()
		var names []string
		code, body := adminCall(t, a, "GET", "/rate_limit/zones", "")
		for _, z := range decodeAs[adminZones](t, body).Zones {
			names = append(names, z.Name)
		}
		if code != 200 || strings.Join(names, " ") != want {
			t.Fatalf("%s: zones %d %v, want [%s]", what, code, names, want)
		}
	}
	used := func(what string, want int64) {
		t.Helper()
		code, body := adminCall(t, a, "GET", "/rate_limit/zones/api/keys/192.0.2.1", "")
		if code != 200 || decodeAs[adminKey](t, body).Tiers[0].Used != want {
			t.Fatalf("%s: GET key %d %s, want %d used", what, code, body, want)
		}
	}
	used("while the reload provisions", 1)
	h := new(Handler)
	if err := json.Unmarshal([]byte(conflicting), h); err != nil {
		t.Fatal(err)
	}
	if err := provisionOn(failed, h, clock); err == nil || !strings.Contains(err.Error(), "defined differently") {
		t.Fatalf("the conflicting handler provisioned: %v", err)
	}
	h.Cleanup() // as Caddy cleans up a module whose Provision failed
	first.Cleanup()
	zonesNamed("after the failed reload", "api")
	used("after the failed reload", 1)
	if code, body := adminCall(t, a, "DELETE", "/rate_limit/zones/api/keys/192.0.2.1", ""); code != 200 {
		t.Fatalf("DELETE key: %d %s", code, body)
	}
	used("after the reset", 0)

	// A reload to a config without rate_limit handlers: no zones.
	plain := testContext(t)
	active = plain.GetMetricsRegistry()
	zonesNamed("a running config without rate_limit", "")
	if code, body := adminCall(t, a, "GET", "/rate_limit/zones/api/keys/192.0.2.1", ""); code != 404 {
		t.Fatalf("GET key of a config without rate_limit: %d %s, want 404", code, body)
	}

	// No config running (a router provisioned outside Caddy's loading):
	// the router's own load.
	active = nil
	a.reg = running.GetMetricsRegistry()
	zonesNamed("no config running", "api")
}

// adminCase is a request to the API and what it must get: the status and
// a part of the body.
type adminCase struct {
	method, path, body string
	code               int
	msg                string
}

// hostileCases are requests an operator's typo or a hostile client may
// send about key k of zone, whose store can inspect and block: each gets
// a 4xx with a message, or is served.
func hostileCases(zone string) []adminCase {
	keys := "/rate_limit/zones/" + zone + "/keys/"
	block := keys + "k/block"
	return []adminCase{
		{"GET", keys + "a%2Fb", "", 200, `"key":"a/b"`},
		{"GET", keys + "a%00b", "", 200, `"key":"a\u0000b"`},
		{"GET", keys + strings.Repeat("k", 1<<20), "", 200, `"key":"#`},
		{"GET", "/rate_limit/zones/" + strings.Repeat("z", 1<<20) + "/keys/k", "", 404, "unknown zone: a zone name is at most 128 characters"},
		{"GET", "/rate_limit/zones/nope%2F/keys/k", "", 404, `unknown zone "nope/"`},
		{"GET", "/rate_limit/zones/" + zone + "%00/keys/k", "", 404, `unknown zone "` + zone + `\x00"`},
		{"PATCH", keys + "k", "", 405, "PATCH not allowed"},
		{"HEAD", keys + "k", "", 405, "HEAD not allowed"},
		{"PUT", block, `{"duration": "1h"}`, 405, "PUT not allowed"},
		{"GET", block, "", 405, "GET not allowed"},
		{"POST", keys + "k", `{"duration": "1h"}`, 405, "POST not allowed"},
		{"POST", block, `{"duration": "-1h"}`, 400, "duration must be positive, got -1h0m0s"},
		{"POST", block, `{"duration": "0s"}`, 400, "duration must be positive, got 0s"},
		{"POST", block, `{"duration": 0}`, 400, "duration must be positive, got 0s"},
		{"POST", block, `{"duration": 9223372036854775807}`, 400, "duration must be at most 3650d"},
		{"POST", block, `{"duration": "3651d"}`, 400, "duration must be at most 3650d"},
		{"POST", block, `{"duration": "100000000h"}`, 400, "invalid duration"},
		{"POST", block, `{"duration": 1e400}`, 400, "cannot unmarshal number 1e400"},
		{"POST", block, `{"duration": "1e400"}`, 400, "1e400"},
		{"POST", block, `{"duration": "soon"}`, 400, "body"},
		{"POST", block, `{}`, 400, "duration is missing"},
		{"POST", block, `{"duration": null}`, 400, "duration is missing"},
		{"POST", block, `null`, 400, "duration is missing"},
		{"POST", block, ``, 400, "EOF"},
		{"POST", block, `[1]`, 400, "cannot unmarshal array"},
		{"POST", block, `{"duration": "1h", "for": "2h"}`, 400, `unknown field "for"`},
		{"POST", block, `{"duration": "1h"} {"duration": "2h"}`, 400, "more after the object"},
		{"POST", block, `{"duration": "1h"}x`, 400, "more after the object"},
		{"POST", block, `{"duration": "1h", "pad": "` + strings.Repeat("a", 10<<20) + `"}`, 413, "at most 1024 bytes"},
		{"POST", block, `{"duration": "3650d"}`, 200, `"blocked_until"`},
		{"DELETE", block, `{"duration": "1h"}`, 200, `"key":"k"`},
		{"GET", keys + "k", strings.Repeat("a", 10<<20), 200, `"key":"k"`},
		{"DELETE", keys + "k", "", 200, `"key":"k"`},
	}
}

// checkAdminCase runs c through a; a status other than c.code, or a body
// without c.msg, fails the test.
func checkAdminCase(t *testing.T, a *AdminAPI, c adminCase) {
	t.Helper()
	code, body := adminCall(t, a, c.method, c.path, c.body)
	if code != c.code || !strings.Contains(body, c.msg) {
		t.Errorf("%s %.80s %.40s: %d %.200q, want %d and %q", c.method, c.path, c.body, code, body, c.code, c.msg)
	}
}

// TestAdminHostileRequests: malformed, oversized and unexpected requests
// to a memory zone get a 4xx with a message (never a 500 or a panic); an
// address typed with or without the zone's prefixes is the key the
// handler forms for it.
func TestAdminHostileRequests(t *testing.T) {
	clock := newClock()
	a, hs := adminSetup(t, clock, `{"zones": [{"name": "ip", "key": "{http.request.remote.host}", "ipv4_prefix": 24, "ipv6_prefix": 64,
		"limits": [{"events": 5, "window": 60000000000}]}]}`)
	serve(hs[0], newReq("203.0.113.7:1"))
	serve(hs[0], newReq("[2001:db8::1]:1"))
	for _, c := range hostileCases("ip") {
		checkAdminCase(t, a, c)
	}
	for _, c := range []struct{ key, want string }{
		{"203.0.113.99", "203.0.113.0/24"},
		{"203.0.113.0%2F24", "203.0.113.0/24"},
		{"2001:db8::ffff", "2001:db8::/64"},
		{"%5B2001:db8::1%5D", "2001:db8::/64"},
		{"2001:db8::%2F64", "2001:db8::/64"},
	} {
		code, body := adminCall(t, a, "GET", "/rate_limit/zones/ip/keys/"+c.key, "")
		if k := decodeAs[adminKey](t, body); code != 200 || k.Key != c.want || k.Tiers[0].Used != 1 {
			t.Errorf("GET key %s: %d %s, want key %s with 1 used", c.key, code, body, c.want)
		}
	}
}

// TestAdminHostileRequestsRedis: hostileCases for zones on Redis: store
// redis, the two-layer store of sync_interval, and lease, whose store can
// inspect and reset but not block (501 where the others block).
func TestAdminHostileRequestsRedis(t *testing.T) {
	srv := redistest.Start(t)
	zone := func(name, extra string) string {
		return fmt.Sprintf(`{%s"store": "redis", "redis": {"addresses": [%q]}, "zones": [{"name": %q, "key": "{http.request.remote.host}",
			"algorithm": "sliding_window", "ipv4_prefix": 24, "limits": [{"events": 5, "window": 3600000000000}]}]}`, extra, srv.Addr, name)
	}
	ctx := testContext(t)
	provisionLoad(t, ctx, nil, zone("adm_hostile_redis", ""), zone("adm_hostile_sync", `"sync_interval": 3600000000000,`),
		zone("adm_hostile_lease", `"lease": 1000000000,`))
	a := new(AdminAPI)
	if err := a.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"adm_hostile_redis", "adm_hostile_sync", "adm_hostile_lease"} {
		for _, c := range hostileCases(name) {
			if name == "adm_hostile_lease" && c.code == 200 && strings.HasSuffix(c.path, "/block") {
				c.code, c.msg = http.StatusNotImplemented, "a lease zone cannot block keys"
			}
			checkAdminCase(t, a, c)
		}
		code, body := adminCall(t, a, "GET", "/rate_limit/zones/"+name+"/keys/203.0.113.7", "")
		if k := decodeAs[adminKey](t, body); code != 200 || k.Key != "203.0.113.0/24" {
			t.Errorf("%s: GET an address: %d %s, want the key 203.0.113.0/24", name, code, body)
		}
	}
}

// TestAdminLease: a lease zone's key is looked at and reset through the
// API as Redis holds it (the units leased count as used); reset, it is
// admitted again at once, though this instance had cached its denial. It
// cannot be blocked (501).
func TestAdminLease(t *testing.T) {
	srv := redistest.Start(t)
	clock := newClock()
	a, hs := adminSetup(t, clock, fmt.Sprintf(`{"store": "redis", "redis": {"addresses": [%q]}, "lease": 1000000000,
		"zones": [{"name": "adm_lease", "key": "{http.request.remote.host}", "limits": [{"events": 5, "window": 3600000000000}]}]}`, srv.Addr))
	const path = "/rate_limit/zones/adm_lease/keys/192.0.2.1"
	req := func() int { return serve(hs[0], newReq("192.0.2.1:1")).code }
	get := func() adminTierState {
		t.Helper()
		code, body := adminCall(t, a, "GET", path, "")
		k := decodeAs[adminKey](t, body)
		if code != 200 || len(k.Tiers) != 1 || k.BlockedUntil != nil {
			t.Fatalf("GET key: %d %s, want one tier, not blocked", code, body)
		}
		return k.Tiers[0]
	}
	if tr := get(); tr.Used != 0 || tr.Remaining != 5 || tr.Limit != 5 {
		t.Fatalf("GET before any request: %+v, want 0 of 5 used", tr)
	}
	for i := range 2 {
		if code := req(); code != 200 {
			t.Fatalf("request %d: %d", i+1, code)
		}
	}
	// Two admitted; a unit leased for the next request counts too.
	if tr := get(); tr.Used < 2 || tr.Used+tr.Remaining != 5 {
		t.Fatalf("GET after 2 requests: %+v, want at least 2 of 5 used", tr)
	}
	for i := 2; i < 5; i++ {
		if code := req(); code != 200 {
			t.Fatalf("request %d: %d", i+1, code)
		}
	}
	if code := req(); code != http.StatusTooManyRequests {
		t.Fatalf("request 6: %d, want 429", code)
	}
	if tr := get(); tr.Used != 5 || tr.Remaining != 0 {
		t.Fatalf("GET after the limit: %+v, want 5 of 5 used", tr)
	}
	if code, body := adminCall(t, a, "DELETE", path, ""); code != 200 {
		t.Fatalf("DELETE key: %d %s", code, body)
	}
	if tr := get(); tr.Used != 0 || tr.Remaining != 5 {
		t.Fatalf("GET after the reset: %+v, want whole", tr)
	}
	if code := req(); code != 200 {
		t.Fatalf("request after the reset: %d, want 200", code)
	}
	for _, method := range []string{"POST", "DELETE"} {
		code, body := adminCall(t, a, method, path+"/block", `{"duration": "1h"}`)
		if code != http.StatusNotImplemented || !strings.Contains(body, "a lease zone cannot block keys") {
			t.Errorf("%s block: %d %s, want 501 saying why", method, code, body)
		}
	}
}

// A reload that unloads the config whose zone a request found closes its
// Redis client under the request: the zone of the config that now runs
// answers instead of a 502.
func TestAdminReloadClosesOldClient(t *testing.T) {
	srv := redistest.Start(t)
	old := testContext(t)
	oldH := provisionLoad(t, old, nil, `{"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},
		"zones":[{"name":"api","key":"k","limits":[{"events":5,"window":"1m"}]}]}`)[0]
	cur := testContext(t)
	provisionLoad(t, cur, nil, `{"zones":[{"name":"api","key":"k","limits":[{"events":7,"window":"1m"}]}]}`)
	a := new(AdminAPI)
	if err := a.Provision(cur); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/rate_limit/zones/api/keys/k", "", `"limit":7`},
		{"POST", "/rate_limit/zones/api/keys/k/block", `{"duration":"1h"}`, `"blocked_until"`},
	} {
		// The old config runs when the zone is looked up, and its
		// client is closed before the store is asked.
		calls := 0
		a.active = func() *prometheus.Registry {
			calls++
			if calls == 1 {
				return old.GetMetricsRegistry()
			}
			return cur.GetMetricsRegistry()
		}
		if err := oldH.rt.redis.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			t.Fatal(err)
		}
		if code, body := adminCall(t, a, c.method, c.path, c.body); code != 200 || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want 200 with %s", c.method, c.path, code, body, c.want)
		}
	}
}
