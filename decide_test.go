package ratelimit

import (
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// costZone is a zone of 2 requests a second per address whose requests
// cost what their X-Cost header says, with extra zone members (each
// followed by a comma).
func costZone(zoneExtra string) string {
	return addrZone("c", `"cost":"{http.request.header.X-Cost}","limits":[{"events":2,"window":"1s"}]`, zoneExtra, "")
}

// A request whose cost no tier can admit, of a key that block_for blocked,
// is answered with the block: Retry-After and the headers count down the
// block, the denial is logged as blocked. Such a request blocks a key like
// any other denial.
func TestNeverAdmittedBlocked(t *testing.T) {
	clock := newClock()
	h := provision(t, costZone(`"block_for":"1m",`), clock)
	logs := observe(h, zapcore.DebugLevel)
	for range 2 {
		serve(h, newReq("192.0.2.1:1"))
	}
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 || res.hdr.Get("Retry-After") != "60" {
		t.Fatalf("over the limit: %d, Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	clock.Advance(10 * time.Second)
	res := serve(h, newReq("192.0.2.1:1", header("X-Cost", "5")))
	if res.code != 429 || res.called {
		t.Fatalf("cost 5 of a blocked key: %d", res.code)
	}
	expectHeaders(t, res, map[string]string{"Retry-After": "50", "X-RateLimit-Reset": "50", "X-RateLimit-Remaining": "0"})
	expectPlaceholders(t, res, map[string]string{"{http.rate_limit.retry_after}": "50", "{http.rate_limit.exceeded.name}": "c"})
	denials := logs.FilterMessage("rate limit exceeded").All()
	if n := len(denials); n != 2 || denials[1].ContextMap()["blocked"] != true {
		t.Fatalf("%d denials logged, the last %v; want 2, the last blocked", n, denials[n-1].ContextMap())
	}

	// A key never seen: the request of cost 5 is denied, which blocks the
	// key for block_for, so that its next request is refused too.
	res = serve(h, newReq("192.0.2.2:1", header("X-Cost", "5")))
	if res.code != 429 || res.hdr.Get("Retry-After") != "60" {
		t.Fatalf("cost 5 with block_for: %d, Retry-After %q; want the block's 60", res.code, res.hdr.Get("Retry-After"))
	}
	clock.Advance(2 * time.Second)
	if res := serve(h, newReq("192.0.2.2:1")); res.code != 429 || res.hdr.Get("Retry-After") != "58" {
		t.Fatalf("after a denied cost 5: %d, Retry-After %q; want blocked", res.code, res.hdr.Get("Retry-After"))
	}
}

// Without block_for, a request whose cost no tier can admit is refused
// with the tier's window as Retry-After, and counts nothing.
func TestNeverAdmittedNoBlock(t *testing.T) {
	clock := newClock()
	h := provision(t, costZone(""), clock)
	res := serve(h, newReq("192.0.2.1:1", header("X-Cost", "5")))
	if res.code != 429 || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("cost 5: %d, Retry-After %q; want the window's 1", res.code, res.hdr.Get("Retry-After"))
	}
	for i := range 2 {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d after: %d", i, res.code)
		}
	}
}

// With on_limit wait, a request whose cost no tier can admit does not
// wait, and a blocked key's is answered with the block.
func TestNeverAdmittedBlockedWait(t *testing.T) {
	clock := newClock()
	h := provision(t, costZone(`"block_for":"3s","on_limit":"wait","max_wait":"5s",`), clock)
	for range 2 {
		serve(h, newReq("192.0.2.1:1"))
	}
	if _, err := zoneBlocker(t, h).Block(t.Context(), "192.0.2.1", time.Time{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	res := serve(h, newReq("192.0.2.1:1", header("X-Cost", "5")))
	if res.code != 429 || res.hdr.Get("Retry-After") != "3600" {
		t.Fatalf("cost 5 of a blocked key: %d, Retry-After %q; want the block's 3600", res.code, res.hdr.Get("Retry-After"))
	}
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("slept %v", s)
	}
}

// With block_for and Redis failing, a request whose cost no tier can admit
// is still refused (the known denial), not let through by on_error open.
func TestNeverAdmittedRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, `{"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},"zones":[{"name":"api","key":"{http.request.remote.host}",
		"block_for":"1m","cost":"{http.request.header.X-Cost}","limits":[{"events":2,"window":"1s"}]}]}`, nil)
	if res := serve(h, newReq("192.0.2.1:1", header("X-Cost", "5"))); res.code != 429 || res.hdr.Get("Retry-After") != "60" {
		t.Fatalf("Redis up: %d, Retry-After %q; want the block's 60", res.code, res.hdr.Get("Retry-After"))
	}
	srv.Stop()
	if res := serve(h, newReq("192.0.2.2:1", header("X-Cost", "5"))); res.code != 429 || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("Redis down: %d, Retry-After %q; want the known denial", res.code, res.hdr.Get("Retry-After"))
	}
	if res := serve(h, newReq("192.0.2.2:1")); res.code != 200 {
		t.Fatalf("Redis down, cost 1: %d, want on_error open's 200", res.code)
	}
}
