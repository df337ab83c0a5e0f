package ratelimit

import (
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
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
