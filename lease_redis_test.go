package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// With lease, a Redis that fails decides as on_error says, as in the other
// Redis modes: the key's first request calls Redis (no lease held yet).
func TestLeaseOnError(t *testing.T) {
	testRedisOnError(t, `"lease":"1s",`)
}

// With lease, the circuit breaker opens and closes as in the other modes.
func TestLeaseBreaker(t *testing.T) {
	testRedisBreaker(t, `"lease":"1s",`)
}

// A leasing handler limits like the plain one, and writes its keys under
// ":ls:".
func TestLeaseStoreLimits(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, redisConfig(srv.Addr, 5, `"lease":"1s",`), nil)
	for i := 1; i <= 7; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		if want := map[bool]int{true: 200, false: 429}[i <= 5]; res.code != want {
			t.Fatalf("request %d: code %d, want %d", i, res.code, want)
		}
	}
	expectKey(t, srv.Addr, "rl:api:{192.0.2.1}:ls:*", "rl:api:{192.0.2.1}:ls:")
}

// leaseCharged returns the units a fixed_window lease key (one tier)
// counts in Redis for key: what its requests took and its leases hold.
func leaseCharged(t *testing.T, addr, zone, key string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "rl:"+zone+":{"+key+"}:ls:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":n") {
			continue // the instances that leased
		}
		state, err := c.Get(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The latest instant, then the window's start and its count.
		f := strings.Fields(state)
		if len(f) != 3 {
			t.Fatalf("state %s = %q, want 3 fields", k, state)
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("no lease state of %s in %q", key, keys)
	return 0
}

// warmLease sends h requests of 192.0.2.1 (the clock standing still: the
// key is hot, its leases grow) and returns the units its lease in zone
// holds then, none of them used.
func warmLease(t *testing.T, h *Handler, addr, zone string) int64 {
	t.Helper()
	const warm = 12
	for i := 0; i < warm; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
	held := leaseCharged(t, addr, zone, "192.0.2.1") - warm
	if held <= 0 {
		t.Fatalf("%d units held after %d requests, want a lease", held, warm)
	}
	return held
}

// openBreaker stops srv and sends h requests of a key that holds no
// lease, each a Redis call that fails, until h's breaker opens.
func openBreaker(t *testing.T, h *Handler, srv *redistest.Server, remote string) {
	t.Helper()
	srv.Stop()
	br := h.rt.redis.Breaker()
	for i := 0; i < redisstore.BreakerFailures; i++ {
		serve(h, newReq(remote))
	}
	if br.State() != breaker.Open {
		t.Fatalf("breaker %s after %d failures", br.State(), redisstore.BreakerFailures)
	}
}

// While the circuit breaker is open, a key's lease still admits, in every
// on_error mode: exactly the units it holds (Redis counts them as taken
// already) and not one more; the next request needs Redis, and on_error
// decides it.
func TestLeaseHeldWhileBreakerOpen(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			h := provision(t, fmt.Sprintf(`{"store":"redis","lease":"1s","on_error":%q,"redis":{"addresses":[%q]},
				"zones":[{"name":"lz","key":"{http.request.remote.host}","algorithm":"fixed_window","limits":[{"events":1000,"window":"1m"}]}]}`,
				mode, srv.Addr), newClock())
			z := h.rt.zones[0]
			held := warmLease(t, h, srv.Addr, "lz")
			openBreaker(t, h, srv, "192.0.2.2:1")

			failed := onErrorDecided(t, z)
			for i := int64(0); i < held; i++ {
				res := serve(h, newReq("192.0.2.1:1"))
				if res.code != 200 || !res.called || res.hdr.Get("X-RateLimit-Remaining") == "" {
					t.Fatalf("request %d of the %d units held: code %d, headers %v; want admitted from the lease", i, held, res.code, res.hdr)
				}
			}
			if n := onErrorDecided(t, z) - failed; n != 0 {
				t.Fatalf("%v of the %d requests with a lease held decided by on_error", n, held)
			}
			res := serve(h, newReq("192.0.2.1:1"))
			if want := map[string]int{"open": 200, "closed": 503, "local": 200}[mode]; res.code != want {
				t.Fatalf("lease used up: code %d, want %d (on_error %s)", res.code, want, mode)
			}
			if n := onErrorDecided(t, z) - failed; n != 1 {
				t.Fatalf("lease used up: %v requests decided by on_error, want 1", n)
			}
		})
	}
}

// A request a zone admitted from its lease and a later zone refused
// because Redis failed (on_error closed) gives its units back to the
// lease, as the leasing store's undo needs no Redis: the lease still
// admits every unit it holds.
func TestLeaseUndoAfterFailure(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, fmt.Sprintf(`{"store":"redis","lease":"1s","on_error":"closed","redis":{"addresses":[%q]},"zones":[
		{"name":"la","key":"{http.request.remote.host}","algorithm":"fixed_window","limits":[{"events":1000,"window":"1m"}]},
		{"name":"lb","match":[{"path":["/b"]}],"key":"{http.request.remote.host}","algorithm":"fixed_window","limits":[{"events":1000,"window":"1m"}]}]}`,
		srv.Addr), newClock())
	held := warmLease(t, h, srv.Addr, "la")
	if held <= 3 {
		t.Fatalf("a lease of %d units, want more than 3", held)
	}
	srv.Stop()
	for i := 0; i < 3; i++ {
		if res := serve(h, newReq("192.0.2.1:1", path("/b"))); res.code != 503 {
			t.Fatalf("zone lb failing, request %d: code %d, want 503", i, res.code)
		}
	}
	admitted := int64(0)
	for admitted <= held && serve(h, newReq("192.0.2.1:1")).code == 200 {
		admitted++
	}
	if admitted != held {
		t.Fatalf("the lease of %d admitted %d after 3 requests refused, want all %d", held, admitted, held)
	}
}
