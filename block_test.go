package ratelimit

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/zonelimit/caddy-ratelimit/store"
)

// blockZone is a zone of 2 requests a second per address that blocks a
// denied address for a minute, with extra zone members (each followed by
// a comma) and handler members (each followed by a comma).
func blockZone(zoneExtra, handlerExtra string) string {
	return addrZone("b", `"block_for":"1m","limits":[{"events":2,"window":"1s"}]`, zoneExtra, handlerExtra)
}

// zoneBlocker is the Blocker of h's first zone's store.
func zoneBlocker(t *testing.T, h *Handler) store.Blocker {
	t.Helper()
	b, ok := h.rt.zones[0].store.(store.Blocker)
	if !ok {
		t.Fatalf("the zone's store %T cannot block", h.rt.zones[0].store)
	}
	return b
}

// TestBlockFor: a denied key is refused for block_for from the denial,
// long after its window would have admitted it again, with Retry-After and
// the rate-limit headers counting down the block; then it is admitted.
func TestBlockFor(t *testing.T) {
	clock := newClock()
	h := provision(t, blockZone("", ""), clock)
	logs := observe(h, zapcore.DebugLevel)
	for i := range 2 {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called {
		t.Fatalf("over the limit: %d", res.code)
	}
	expectHeaders(t, res, map[string]string{"Retry-After": "60", "RateLimit": `"b";r=0;t=60`, "X-RateLimit-Reset": "60"})

	clock.Advance(10*time.Second + 500*time.Millisecond) // ten windows later
	res = serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called {
		t.Fatalf("during the block: %d", res.code)
	}
	// 49.5s left: rounded up, never early.
	expectHeaders(t, res, map[string]string{"Retry-After": "50", "RateLimit": `"b";r=0;t=50`,
		"X-RateLimit-Reset": "50", "X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0"})
	expectPlaceholders(t, res, map[string]string{"{http.rate_limit.retry_after}": "50", "{http.rate_limit.exceeded.name}": "b"})
	denials := logs.FilterMessage("rate limit exceeded").All()
	if len(denials) != 2 {
		t.Fatalf("%d denials logged, want 2", len(denials))
	}
	for _, e := range denials {
		if e.ContextMap()["blocked"] != true {
			t.Errorf("denial logged without blocked: %v", e.ContextMap())
		}
	}
	if res := serve(h, newReq("192.0.2.2:1")); res.code != 200 {
		t.Fatalf("another address: %d", res.code)
	}
	// A refusal by the block is a denial of the zone, in the metrics too.
	if n := counterValue(t, h.rt.zones[0].m.denied); n != 2 {
		t.Errorf("denied counter %v, want 2", n)
	}

	clock.Advance(49*time.Second + 499*time.Millisecond)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("1ms before the end: %d, Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	clock.Advance(time.Millisecond)
	// The refusals counted nothing: the limit is whole again.
	for i := range 2 {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d after the block: %d", i, res.code)
		}
	}
}

// TestBlockForDryRun: dry_run decides and logs the block but lets every
// request through.
func TestBlockForDryRun(t *testing.T) {
	clock := newClock()
	h := provision(t, blockZone("", `"dry_run":true,`), clock)
	logs := observe(h, zapcore.DebugLevel)
	for i := range 4 {
		if i == 3 {
			clock.Advance(10 * time.Second)
		}
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
	dry := logs.FilterMessage("rate limit exceeded (dry run: not rejected)").All()
	if len(dry) != 2 {
		t.Fatalf("%d dry-run denials logged, want 2 (the denial, then one request blocked 10s later)", len(dry))
	}
	if m := dry[1].ContextMap(); m["blocked"] != true || m["retry_after"] != 50*time.Second {
		t.Errorf("blocked request logged as %v", m)
	}
}

// TestBlockForWait: with on_limit wait, a request waits out a block that
// ends within max_wait, and is rejected at once when the block outlasts it.
func TestBlockForWait(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"5s","block_for":"3s",
		"limits":[{"events":1,"window":"1s"}]}]}`, clock)
	serve(h, newReq("192.0.2.1:1"))
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 200 || !res.called {
		t.Fatalf("a request that can wait out the block: %d", res.code)
	}
	if s := clock.Slept(); len(s) != 1 || s[0] != 3*time.Second {
		t.Fatalf("slept %v, want the block's 3s", s)
	}
	if _, err := zoneBlocker(t, h).Block(context.Background(), "k", time.Time{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	res = serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called || res.hdr.Get("Retry-After") != "3600" {
		t.Fatalf("a block beyond max_wait: %d, Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	if s := clock.Slept(); len(s) != 1 {
		t.Fatalf("slept %v for a block beyond max_wait", s)
	}
}

// TestBlockBeyondMaxWait: a key blocked for longer than max_wait is
// rejected at once with the block's time left as Retry-After and t, in a
// zone that shapes (leaky_bucket) as in the others.
func TestBlockBeyondMaxWait(t *testing.T) {
	for _, alg := range []string{"sliding_log", "gcra", "leaky_bucket"} {
		t.Run(alg, func(t *testing.T) {
			clock := newClock()
			h := provision(t, `{"zones":[{"name":"w","key":"k","algorithm":"`+alg+`","on_limit":"wait","max_wait":"2s",
				"limits":[{"events":5,"window":"1s"}]}]}`, clock)
			if _, err := zoneBlocker(t, h).Block(context.Background(), "k", time.Time{}, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			res := serve(h, newReq("192.0.2.1:1"))
			if res.code != 429 || res.called {
				t.Fatalf("a block beyond max_wait: %d, called %v", res.code, res.called)
			}
			expectHeaders(t, res, map[string]string{"Retry-After": "10", "RateLimit": `"w";r=0;t=10`})
			if s := clock.Slept(); len(s) != 0 {
				t.Fatalf("slept %v for a block beyond max_wait", s)
			}
		})
	}
}

// TestBlockForCountStatus: a count_status zone blocks at the denial up
// front, once the counted responses reach the limit.
func TestBlockForCountStatus(t *testing.T) {
	clock := newClock()
	h := provision(t, loginZone(`"block_for":"10m",`, ""), clock)
	expectLogin(t, h, "right password", 200, "", rightPassword) // given back
	for range 3 {
		expectLogin(t, h, "wrong password", 401, "")
	}
	res := expectLogin(t, h, "over the limit", 429, "", rightPassword)
	if got := res.hdr.Get("Retry-After"); got != "600" {
		t.Fatalf("Retry-After %q, want the block's 600", got)
	}
	clock.Advance(2 * time.Minute) // the failures have left the window
	res = expectLogin(t, h, "blocked", 429, "", rightPassword)
	if got := res.hdr.Get("Retry-After"); got != "480" {
		t.Fatalf("Retry-After %q, want 480", got)
	}
	clock.Advance(8 * time.Minute)
	expectLogin(t, h, "after the block", 200, "", rightPassword)
}

// TestOperatorBlockHandler: a key an operator blocks through the zone's
// store is refused though it was never denied, until unblocked; a zone
// without block_for can be blocked too.
func TestOperatorBlockHandler(t *testing.T) {
	clock := newClock()
	h := provision(t, perIP3, clock)
	ctx := context.Background()
	b := zoneBlocker(t, h)
	until, err := b.Block(ctx, "192.0.2.9", time.Time{}, 90*time.Second)
	if err != nil || !until.Equal(clock.Now().Add(90*time.Second)) {
		t.Fatalf("Block = %v, %v", until, err)
	}
	res := serve(h, newReq("192.0.2.9:1"))
	if res.code != 429 || res.hdr.Get("Retry-After") != "90" {
		t.Fatalf("blocked by an operator: %d, Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	if got, err := b.BlockedUntil(ctx, "192.0.2.9", time.Time{}); err != nil || !got.Equal(until) {
		t.Fatalf("BlockedUntil = %v, %v", got, err)
	}
	if err := b.Unblock(ctx, "192.0.2.9"); err != nil {
		t.Fatal(err)
	}
	if res := serve(h, newReq("192.0.2.9:1")); res.code != 200 || res.hdr.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("after Unblock: %d, remaining %q", res.code, res.hdr.Get("X-RateLimit-Remaining"))
	}
}
