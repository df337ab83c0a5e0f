package ratelimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

func TestDenyCache(t *testing.T) {
	c := newDenyCache()
	t0 := time.Unix(1_700_000_000, 0)
	d := algorithms.Decision{Limit: 5, RetryAfter: 2 * time.Second, ResetAfter: 10 * time.Second}
	c.put("k", t0, d)
	c.put("allowed", t0, algorithms.Decision{Allowed: true})
	if _, ok := c.get("allowed", t0); ok {
		t.Error("an admission was cached")
	}
	got, ok := c.get("k", t0.Add(500*time.Millisecond))
	if !ok || got.RetryAfter != 1500*time.Millisecond || got.ResetAfter != 9500*time.Millisecond || got.Limit != 5 || got.Allowed {
		t.Fatalf("after 500ms: %+v, %v", got, ok)
	}
	if _, ok := c.get("k", t0.Add(2*time.Second)); ok {
		t.Error("denial still cached at its Retry-After")
	}
	if _, ok := c.get("k", t0); ok {
		t.Error("an expired denial came back (time going backwards)")
	}
	// A flood of distinct keys stays bounded.
	for i := 0; i < 10*denyShards*denyShardKeys/4; i++ {
		c.put(strconv.Itoa(i), t0, d)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
		if len(c.shards[i].m) > denyShardKeys {
			t.Fatalf("shard %d holds %d keys", i, len(c.shards[i].m))
		}
	}
	if n > denyShards*denyShardKeys {
		t.Fatalf("%d keys cached", n)
	}
	var nilCache *denyCache
	nilCache.put("k", t0, d)
	if _, ok := nilCache.get("k", t0); ok {
		t.Error("nil cache answered")
	}
}

// With store redis, a key denied again before its Retry-After is denied
// without a Redis call; with count_rejected every denial reaches Redis.
func TestRedisDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		name, extra string
		cached      bool
	}{
		{"cached", "", true},
		{"count_rejected", `"count_rejected":true,`, false},
		{"variable cost", `"cost":"{http.request.header.X-Cost}",`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := provision(t, `{"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},
				"zones":[{"name":"dc`+strconv.Itoa(len(c.name))+`","key":"k",`+c.extra+`"limits":[{"events":1,"window":"1m"}]}]}`, nil)
			serve(h, newReq("192.0.2.1:1"))
			if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
				t.Fatalf("second request: %d", res.code)
			}
			if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				res := serve(h, newReq("192.0.2.1:1"))
				if ra, _ := strconv.Atoi(res.hdr.Get("Retry-After")); res.code != 429 || ra < 1 || ra > 60 {
					t.Fatalf("request %d: %d, Retry-After %q", i, res.code, res.hdr.Get("Retry-After"))
				}
			}
			stats, err := redistest.Do(srv.Addr, "INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			calls := commandCalls(stats)["evalsha"]
			if c.cached && calls != 0 || !c.cached && calls != 10 {
				t.Errorf("%d EVALSHA for 10 denials (cached: %v)", calls, c.cached)
			}
		})
	}
}
