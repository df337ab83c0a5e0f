// Package ops holds operational tests of the rate_limit handler inside a
// real, in-process Caddy (Caddy's caddytest harness): config reloads under
// load, reloads that must leak nothing, client identity behind proxies, the
// Prometheus metrics on the admin endpoint, and the TTL of every Redis key.
//
// Its Caddy listens on free ports of its own (see caddytesting.New), so
// that it runs in parallel with the package caddytest/integration under
// `go test ./...`, and beside any other test suite on the machine.
//
// Every test uses zone names of its own (a zone's state survives a config
// load when the zone is unchanged) and starts its own redis-server
// (internal/redistest). Windows are an hour or more, so that no count
// depends on timing; whatever happens asynchronously (goroutines ending,
// connections closing, the breaker) is polled with a bounded deadline.
package ops

import (
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/zonelimit/caddy-ratelimit"
)

// live is the package's Caddy. Its grace period is long enough that a
// reload never cuts a request short (the old server finishes what it
// accepted).
var live = caddytesting.New("10s")

func TestMain(m *testing.M) { live.Main(m) }
