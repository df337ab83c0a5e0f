package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// blockWindow is the window of the block_for tests, of one request:
// short, so that the tests can let it pass (and the count be whole again)
// while the block of an hour still refuses the client, whatever the time
// that really passed.
const blockWindow = 200 * time.Millisecond

// overLimit sends requests with hdr until one is refused, and returns it:
// on a loaded machine two requests may fall in two windows.
func overLimit(t *testing.T, hdr ...string) caddytesting.Response {
	t.Helper()
	for range 50 {
		if r := live.Get(t, "/", hdr...); r.Code != 200 {
			return r
		}
	}
	t.Fatalf("50 requests with %q in windows of %s: none refused", hdr, blockWindow)
	return caddytesting.Response{}
}

// waitPast sleeps until d has passed since t: real time for a real Caddy;
// what the test asserts after it holds however much longer it slept.
func waitPast(t time.Time, d time.Duration) {
	if rest := time.Until(t.Add(d)); rest > 0 {
		time.Sleep(rest)
	}
}

// expectBlocked fails the test unless r is a refusal by a block of about
// an hour: Retry-After and the headers' reset the time left of the block.
func expectBlocked(t *testing.T, r caddytesting.Response, what string) {
	t.Helper()
	caddytesting.ExpectCode(t, r, 429, what)
	caddytesting.ExpectRetryAfter(t, r, 3500, 3600)
	if reset := r.Header.Get("X-RateLimit-Reset"); reset != r.Header.Get("Retry-After") {
		t.Errorf("%s: X-RateLimit-Reset %q, Retry-After %q", what, reset, r.Header.Get("Retry-After"))
	}
	if rl := r.Header.Get("RateLimit"); !strings.HasSuffix(rl, ";t="+r.Header.Get("Retry-After")) {
		t.Errorf("%s: RateLimit %q, want t= the Retry-After", what, rl)
	}
}

// block_for through a real Caddy, memory store: past the limit the client
// is refused for block_for, after its window has freed the count too.
func TestBlockFor(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_block", caddytesting.ClientKey,
		fmt.Sprintf("limit 1 %s", blockWindow), "block_for 1h"), respondOK))
	expectBlocked(t, overLimit(t, clientA()...), "over the limit")
	denied := time.Now()
	waitPast(denied, 2*blockWindow)
	expectBlocked(t, live.Get(t, "/", clientA()...), "after the window")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "b"), 200, "another client")
}

// block_for with store redis: a client blocked through one handler (one
// instance) is refused by another on the same Redis, through the block's
// key, which expires with the block.
func TestBlockForRedisFleet(t *testing.T) {
	srv := redistest.Start(t)
	var b strings.Builder
	for i, host := range []string{"a.test", "b.test"} {
		fmt.Fprintf(&b, `
http://%s {
	rate_limit {
		zone it_block_redis {
			key {http.request.header.X-Client}
			limit 1 %s
			block_for 1h
		}
		store redis
%s	}
	respond "ok"
}
`, host, blockWindow, caddytesting.RedisBlock(srv.Addr, fmt.Sprintf("pool_size %d", 8+i)))
	}
	live.LoadSites(t, b.String())
	expectBlocked(t, overLimit(t, "Host", "a.test", "X-Client", "a"), "a.test over the limit")
	denied := time.Now()
	expectBlocked(t, live.Get(t, "/", "Host", "b.test", "X-Client", "a"), "b.test")
	waitPast(denied, 2*blockWindow)
	expectBlocked(t, live.Get(t, "/", "Host", "b.test", "X-Client", "a"), "b.test after the window")
	caddytesting.ExpectCode(t, live.Get(t, "/", "Host", "b.test", "X-Client", "b"), 200, "another client")

	keys := redisKeys(t, srv.Addr, "*:b")
	if len(keys) != 1 || keys[0] != "rl:it_block_redis:{a}:b" {
		t.Fatalf("block keys %q, want the one of client a", keys)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if pttl := c.PTTL(context.Background(), keys[0]).Val(); pttl <= 59*time.Minute || pttl > time.Hour {
		t.Fatalf("block key's TTL %v, want the hour left", pttl)
	}
}
