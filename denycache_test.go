package ratelimit

import (
	"strconv"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

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
