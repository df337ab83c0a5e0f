package ratelimit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// provisionInLoad provisions config in ctx (one config load) as a handler
// of srv (nil: outside any server), with the real clock and the shared
// pool; the caller cleans up. It returns Provision's error.
func provisionInLoad(t *testing.T, ctx caddy.Context, config string, srv *caddyhttp.Server) (*Handler, error) {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(config), h); err != nil {
		t.Fatal(err)
	}
	if srv != nil {
		ctx = ctx.WithValue(caddyhttp.ServerCtxKey, srv)
	}
	err := h.Provision(ctx)
	if err != nil {
		h.Cleanup() // as Caddy does after a failed Provision
	}
	return h, err
}

// siteRoute is a top-level route of host whose handlers are not
// provisioned yet (raw), as Caddy's server has it while it provisions them.
func siteRoute(host string) caddyhttp.Route {
	return caddyhttp.Route{
		MatcherSets: caddyhttp.MatcherSets{{caddyhttp.MatchHost{host}}},
		HandlersRaw: []json.RawMessage{json.RawMessage(`{"handler":"rate_limit"}`)},
	}
}

// provisionSite provisions config as the handler of the site srv.Routes[i]
// in ctx's load, and marks the route provisioned.
func provisionSite(t *testing.T, ctx caddy.Context, config string, srv *caddyhttp.Server, i int) *Handler {
	t.Helper()
	h, err := provisionInLoad(t, ctx, config, srv)
	if err != nil {
		t.Fatal(err)
	}
	srv.Routes[i].Handlers = []caddyhttp.MiddlewareHandler{h}
	return h
}

func cleanupAll(t *testing.T, hs ...*Handler) {
	t.Helper()
	for _, h := range hs {
		if err := h.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
}

const shared5 = `{"zones":[{"name":"shared","key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`

// A zone name is one limit in the whole config: two sites (or two servers)
// naming it share its count in the memory store too, whatever they do with
// its decisions (dry_run, headers, status, match may differ).
func TestZoneSharedBySites(t *testing.T) {
	ctx := testContext(t)
	srv := &caddyhttp.Server{Listen: []string{":80"}, Routes: caddyhttp.RouteList{siteRoute("a.test"), siteRoute("b.test")}}
	a := provisionSite(t, ctx, shared5, srv, 0)
	b := provisionSite(t, ctx, `{"headers":"legacy","status":503,"zones":[{"name":"shared","key":"{http.request.remote.host}",
		"match":[{"path":["/*"]}],"limits":[{"events":5,"window":"1h"}]}]}`, srv, 1)
	other, err := provisionInLoad(t, ctx, shared5, &caddyhttp.Server{Listen: []string{":8080"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanupAll(t, a, b, other)
	for i, h := range []*Handler{a, b, other, a} {
		if got, want := remaining(t, h), []string{"4", "3", "2", "1"}[i]; got != want {
			t.Fatalf("request %d: remaining %s, want %s (one count for the zone)", i+1, got, want)
		}
	}
	if a.rt.zones[0].store != b.rt.zones[0].store {
		t.Fatal("the two sites have a store each")
	}
}

// Two zones of one name with different limit settings in one config load
// fail to load, the error naming both places and what differs; in another
// config load (a reload) a changed zone is fine.
func TestZoneConflict(t *testing.T) {
	for _, c := range []struct {
		name, second, differs string
	}{
		{"limits", `{"zones":[{"name":"shared","key":"{http.request.remote.host}","limits":[{"events":6,"window":"1h"}]}]}`, "limits"},
		{"key", `{"zones":[{"name":"shared","key":"{http.request.header.X}","limits":[{"events":5,"window":"1h"}]}]}`, "key"},
		{"algorithm", `{"zones":[{"name":"shared","algorithm":"gcra","key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`, "algorithm"},
		{"prefix", `{"zones":[{"name":"shared","ipv4_prefix":24,"key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`, "ipv4_prefix"},
		{"block_for", `{"zones":[{"name":"shared","block_for":"1m","key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`, "block_for"},
		{"max_keys", `{"max_keys":10,"zones":[{"name":"shared","key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`, "max_keys"},
		{"store", `{"store":"redis","zones":[{"name":"shared","key":"{http.request.remote.host}","limits":[{"events":5,"window":"1h"}]}]}`, "redis, store"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testContext(t)
			srv := &caddyhttp.Server{Listen: []string{":80"}, Routes: caddyhttp.RouteList{siteRoute("a.test"), siteRoute("b.test")}}
			a := provisionSite(t, ctx, shared5, srv, 0)
			defer cleanupAll(t, a)
			_, err := provisionInLoad(t, ctx, c.second, srv)
			if err == nil {
				t.Fatal("a second definition of the zone with other settings loaded")
			}
			for _, want := range []string{`zone "shared"`, `rate_limit handler #1`, `site host ["a.test"]`,
				`rate_limit handler #2`, `site host ["b.test"]`, `listening on :80`, "differ in " + c.differs + ")"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			// The same change in a new config load (a reload) loads, with
			// a fresh count.
			b, err := provisionInLoad(t, testContext(t), c.second, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanupAll(t, b)
		})
	}
}

// The state of a zone survives a reload when its identity is unchanged,
// whichever handlers name it; a changed limit starts afresh; once every
// config that names it is gone, it is released.
func TestReloadKeepsState(t *testing.T) {
	var released []any // the pool keys of the handlers cleaned up
	// Load 1: two handlers (two sites) with the zone.
	load1 := testContext(t)
	a1, err := provisionInLoad(t, load1, shared5, &caddyhttp.Server{Listen: []string{":8080"}})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := provisionInLoad(t, load1, shared5, &caddyhttp.Server{Listen: []string{":8443"}})
	if err != nil {
		t.Fatal(err)
	}
	remaining(t, a1)
	if got := remaining(t, b1); got != "3" {
		t.Fatalf("b1: remaining %s, want 3", got)
	}

	// Load 2, the same zone in one handler only: the count goes on, before
	// and after load 1 is cleaned up.
	load2 := testContext(t)
	a2, err := provisionInLoad(t, load2, shared5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, a2); got != "2" {
		t.Fatalf("a2: remaining %s, want 2 (count carried over)", got)
	}
	released = append(append(released, a1.rt.poolKeys...), b1.rt.poolKeys...)
	cleanupAll(t, a1, b1)
	if got := remaining(t, a2); got != "1" {
		t.Fatalf("a2 after load 1 is gone: remaining %s, want 1", got)
	}

	// Load 3: a changed limit applies at once to what was counted: 4 of 5
	// used, 7 leave 2 after this request.
	load3 := testContext(t)
	a3, err := provisionInLoad(t, load3, strings.Replace(shared5, `"events":5`, `"events":7`, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, a3); got != "2" {
		t.Fatalf("changed limit: remaining %s, want 2 (count carried over)", got)
	}
	released = append(append(released, a2.rt.poolKeys...), a3.rt.poolKeys...)
	cleanupAll(t, a2, a3)

	// Everything released: a new load starts from scratch, and the pool
	// holds only its entries.
	a4, err := provisionInLoad(t, testContext(t), shared5, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanupAll(t, a4)
	if got := remaining(t, a4); got != "4" {
		t.Fatalf("after all cleanups: remaining %s, want 4", got)
	}
	// Of the entries the earlier loads held, only those a4 holds too are
	// left (another test's handler still draining is not counted).
	ours := make(map[any]bool)
	for _, k := range a4.rt.poolKeys {
		ours[k] = true
	}
	left := make(map[any]bool)
	pool.Range(func(k, v any) bool { left[k] = true; return true })
	for _, k := range released {
		if left[k] && !ours[k] {
			t.Errorf("pool still holds %v after every handler using it was cleaned up", k)
		}
	}
}

func TestSiteOf(t *testing.T) {
	routes := caddyhttp.RouteList{
		{MatcherSets: caddyhttp.MatcherSets{{caddyhttp.MatchHost{"a.test"}}}, Handlers: []caddyhttp.MiddlewareHandler{nil}},
		siteRoute("b.test"),
		siteRoute("c.test"),
	}
	if got := siteOf(routes); got != `host ["b.test"]` {
		t.Fatalf("site %q", got)
	}
	if siteOf(routes[:1]) != "" || siteOf(nil) != "" {
		t.Fatal("no route being provisioned: want no site")
	}
	two := caddyhttp.RouteList{{MatcherSets: caddyhttp.MatcherSets{
		{caddyhttp.MatchHost{"b.test"}, caddyhttp.MatchPath{"/x"}}, {caddyhttp.MatchHost{"c.test"}}},
		HandlersRaw: routes[1].HandlersRaw}}
	if got := siteOf(two); got != `host ["b.test"] path ["/x"] or host ["c.test"]` {
		t.Fatalf("site %q", got)
	}
}

// With store redis, the Redis database and key prefix are part of a zone's
// identity; how the client connects is not (the counts are the same).
func TestZoneRedisLocation(t *testing.T) {
	redisZone := func(redis string) string {
		return `{"store":"redis","redis":` + redis + `,"zones":[{"name":"shared_redis","key":"k","limits":[{"events":5,"window":"1h"}]}]}`
	}
	ctx := testContext(t)
	a, err := provisionInLoad(t, ctx, redisZone(`{"addresses":["127.0.0.1:1"]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanupAll(t, a)
	b, err := provisionInLoad(t, ctx, redisZone(`{"addresses":["127.0.0.1:1"],"read_timeout":"2s","pool_size":3}`), nil)
	if err != nil {
		t.Fatalf("other client settings, same Redis: %v", err)
	}
	defer cleanupAll(t, b)
	for _, other := range []string{`{"addresses":["127.0.0.1:1"],"key_prefix":"x:"}`, `{"addresses":["127.0.0.1:2"]}`, `{"addresses":["127.0.0.1:1"],"db":1}`} {
		if _, err := provisionInLoad(t, ctx, redisZone(other), nil); err == nil || !strings.Contains(err.Error(), "differ in redis)") {
			t.Errorf("redis %s: error %v, want one saying they differ in redis", other, err)
		}
	}
}

// key_resolver null is no key_resolver, as JSON's null is for any option:
// a zone written with it is the zone written without it, one count.
func TestZoneKeyResolverNull(t *testing.T) {
	ctx := testContext(t)
	srv := &caddyhttp.Server{Listen: []string{":80"}, Routes: caddyhttp.RouteList{siteRoute("a.test"), siteRoute("b.test")}}
	a := provisionSite(t, ctx, shared5, srv, 0)
	b := provisionSite(t, ctx, `{"zones":[{"name":"shared","key":"{http.request.remote.host}","key_resolver":null,
		"limits":[{"events":5,"window":"1h"}]}]}`, srv, 1)
	defer cleanupAll(t, a, b)
	if a.rt.zones[0].store != b.rt.zones[0].store {
		t.Fatal("the zone with key_resolver null has a store of its own")
	}
}
