package ratelimit

import (
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// With lease, a Redis that fails decides as on_error says, as in the other
// Redis modes: the key's first request calls Redis (no lease held yet).
func TestLeaseOnError(t *testing.T) {
	srv := redistest.Start(t)
	lease := `"lease":"1s",`
	open := provision(t, redisConfig(srv.Addr, 2, lease), nil)
	closed := provision(t, redisConfig(srv.Addr, 2, lease+`"on_error":"closed",`), nil)
	local := provision(t, redisConfig(srv.Addr, 2, lease+`"on_error":"local",`), nil)
	srv.Stop()

	for i := 0; i < 4; i++ {
		if res := serve(open, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
			t.Fatalf("open, request %d: code %d", i+1, res.code)
		}
		res := serve(closed, newReq("192.0.2.1:1"))
		if res.code != 503 || res.called || res.err != nil {
			t.Fatalf("closed, request %d: code %d err %v", i+1, res.code, res.err)
		}
	}
	for i := 1; i <= 3; i++ {
		res := serve(local, newReq("192.0.2.1:1"))
		if want := map[bool]int{true: 200, false: 429}[i <= 2]; res.code != want {
			t.Fatalf("local, request %d: code %d, want %d", i, res.code, want)
		}
	}
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
