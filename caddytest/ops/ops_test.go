// Package ops holds operational tests of the rate_limit handler inside a
// real, in-process Caddy (Caddy's caddytest harness): config reloads under
// load, reloads that must leak nothing, client identity behind proxies, the
// Prometheus metrics on the admin endpoint, and the TTL of every Redis key.
//
// Its Caddy listens on ports of its own (admin localhost:2998, HTTP 9180,
// HTTPS 9543), so that it runs in parallel with the package
// caddytest/integration (2999, 9080) under `go test ./...`.
//
// Every test uses zone names of its own (a zone's state survives a config
// load when the zone is unchanged) and starts its own redis-server
// (internal/redistest). Windows are an hour or more, so that no count
// depends on timing; whatever happens asynchronously (goroutines ending,
// connections closing, the breaker) is polled with a bounded deadline.
package ops

import (
	"os"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/zonelimit/caddy-ratelimit"
)

const (
	adminPort = 2998
	httpPort  = 9180
	httpsPort = 9543
)

// live is the package's Caddy. Its grace period is long enough that a
// reload never cuts a request short (the old server finishes what it
// accepted).
var live = &caddytesting.Caddy{AdminPort: adminPort, HTTPPort: httpPort, HTTPSPort: httpsPort, GracePeriod: "10s"}

func TestMain(m *testing.M) {
	caddytest.Default.AdminPort = adminPort
	// Loads under -race on a busy machine can take seconds.
	caddytest.Default.LoadRequestTimeout = 30 * time.Second
	caddytest.Default.TestRequestTimeout = 30 * time.Second
	os.Exit(m.Run())
}
