package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/redisstore"
)

// redisConfig is a handler with one zone of events per minute per remote
// host on the redis store at addr, with extra handler options (JSON
// members, each followed by a comma). A "redis" object in extra is merged
// with the one naming addr (encoding/json decodes both into one struct).
func redisConfig(addr string, events int, extra string) string {
	return fmt.Sprintf(`{%s"store":"redis","redis":{"addresses":[%q]},
		"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":%d,"window":"1m"}]}]}`,
		extra, addr, events)
}

func TestRedisStoreLimits(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, redisConfig(srv.Addr, 3, ""), nil)
	for i := 1; i <= 3; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		if res.code != 200 || !res.called {
			t.Fatalf("request %d: code %d", i, res.code)
		}
		if got, want := res.hdr.Get("X-RateLimit-Remaining"), strconv.Itoa(3-i); got != want {
			t.Errorf("request %d: remaining %q, want %q", i, got, want)
		}
	}
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called {
		t.Fatalf("4th request: code %d, called %v", res.code, res.called)
	}
	if ra, _ := strconv.Atoi(res.hdr.Get("Retry-After")); ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q", res.hdr.Get("Retry-After"))
	}
	// Another key is counted on its own.
	if res := serve(h, newReq("192.0.2.2:1")); res.code != 200 {
		t.Fatalf("other key: %d", res.code)
	}
	// The count is in Redis, under the default prefix and the zone.
	expectKey(t, srv.Addr, "rl:api:*", "rl:api:{192.0.2.1}")
}

// Two handlers (two Caddy instances' worth) with their own clients share
// the count in Redis.
func TestRedisStoreSharedAcrossHandlers(t *testing.T) {
	srv := redistest.Start(t)
	// Different pool sizes: different settings, so clients of their own.
	a := provision(t, redisConfig(srv.Addr, 4, `"redis":{"addresses":["`+srv.Addr+`"],"pool_size":3},`), nil)
	b := provision(t, redisConfig(srv.Addr, 4, `"redis":{"addresses":["`+srv.Addr+`"],"pool_size":4},`), nil)
	if a.rt.redis == b.rt.redis {
		t.Fatal("handlers with different settings share a client")
	}
	admitted := 0
	for i := 0; i < 5; i++ {
		for _, h := range []*Handler{a, b} {
			if serve(h, newReq("192.0.2.1:1")).code == 200 {
				admitted++
			}
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d across two handlers, want 4", admitted)
	}
}

// Handlers with equal settings share one client; it is closed when the last
// of them is cleaned up (a reload keeps it open: the new config provisions
// before the old one is cleaned up).
func TestRedisClientSharedAndClosed(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig(srv.Addr, 3, "")
	a := provisionIn(t, cfg, nil)
	b := provisionIn(t, cfg, nil)
	if a.rt.redis != b.rt.redis {
		t.Fatal("equal settings, two clients")
	}
	c := a.rt.redis
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("client closed while still used: %v", err)
	}
	if err := b.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != redis.ErrClosed {
		t.Fatalf("client not closed after its last user: %v", err)
	}
}

func TestRedisPlaceholders(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("RL_TEST_REDIS", srv.Addr)
	t.Setenv("RL_TEST_PREFIX", "ph:")
	h := provision(t, `{"store":"redis","redis":{"addresses":["{env.RL_TEST_REDIS}"],"key_prefix":"{env.RL_TEST_PREFIX}"},
		"zones":[{"name":"z","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, nil)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("code %d", res.code)
	}
	expectKey(t, srv.Addr, "ph:z:*", "ph:z:{k}")
}

// on_error: what a request gets while Redis is down.
func TestRedisOnError(t *testing.T) {
	testRedisOnError(t, "")
}

// testRedisOnError is TestRedisOnError with the handler options mode (JSON
// members, each followed by a comma).
func testRedisOnError(t *testing.T, mode string) {
	srv := redistest.Start(t)
	open := provision(t, redisConfig(srv.Addr, 2, mode), nil)
	closed := provision(t, redisConfig(srv.Addr, 2, mode+`"on_error":"closed",`), nil)
	local := provision(t, redisConfig(srv.Addr, 2, mode+`"on_error":"local",`), nil)
	srv.Stop()

	for i := 0; i < 4; i++ {
		if res := serve(open, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
			t.Fatalf("open, request %d: code %d", i+1, res.code)
		}
		res := serve(closed, newReq("192.0.2.1:1"))
		if res.code != 503 || res.called || res.err != nil {
			t.Fatalf("closed, request %d: code %d err %v", i+1, res.code, res.err)
		}
		if res.hdr.Get("Retry-After") == "" {
			t.Errorf("closed: no Retry-After")
		}
	}
	// local: the memory fallback limits this instance.
	for i := 1; i <= 3; i++ {
		res := serve(local, newReq("192.0.2.1:1"))
		if want := map[bool]int{true: 200, false: 429}[i <= 2]; res.code != want {
			t.Fatalf("local, request %d: code %d, want %d", i, res.code, want)
		}
	}
}

// Strict mode costs exactly one Redis command per decision.
func TestRedisOneCommandPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, `{"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},"zones":[
		{"name":"a","key":"{http.request.remote.host}","algorithm":"gcra","limits":[{"events":100,"window":"1m"},{"events":1000,"window":"1h"}]}]}`, nil)
	serve(h, newReq("192.0.2.1:1")) // connects and loads the script
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := 0; i < n; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
	stats, err := redistest.Do(srv.Addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(stats)
	for cmd, c := range calls {
		switch cmd {
		case "evalsha":
			if c != n {
				t.Errorf("evalsha: %d calls for %d decisions", c, n)
			}
		case "info", "config|resetstat":
			// this test's own
		case "time", "get", "mget", "set":
			// INFO commandstats also counts what the gcra script runs
			// inside Redis
		default:
			t.Errorf("%s: %d calls; want none besides one evalsha per decision", cmd, c)
		}
	}
}

// commandCalls parses INFO commandstats: command name to calls.
func commandCalls(info string) map[string]int {
	m := make(map[string]int)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				m[name], _ = strconv.Atoi(v)
			}
		}
	}
	return m
}

// redisKeys lists the keys at addr that match pattern, space-separated.
func redisKeys(t *testing.T, addr, pattern string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(keys, " ")
}

// expectKey fails the test unless a key at addr that matches pattern
// contains want.
func expectKey(t *testing.T, addr, pattern, want string) {
	t.Helper()
	if keys := redisKeys(t, addr, pattern); !strings.Contains(keys, want) {
		t.Fatalf("keys %s: %q, want one with %s", pattern, keys, want)
	}
}

// Redis down: after redisstore.BreakerFailures failures the breaker opens and requests
// are decided by on_error without calling Redis; once Redis is back (with
// its scripts gone) the prober closes the breaker and decisions are shared
// again.
func TestRedisBreaker(t *testing.T) {
	testRedisBreaker(t, "")
}

// testRedisBreaker is TestRedisBreaker with the handler options mode (JSON
// members, each followed by a comma).
func testRedisBreaker(t *testing.T, mode string) {
	srv := redistest.Start(t)
	h := provision(t, redisConfig(srv.Addr, 100, mode+`"on_error":"closed",`), nil)
	br := h.rt.zones[0].breaker
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("before: %d", res.code)
	}
	srv.Stop()
	for i := 0; i < redisstore.BreakerFailures; i++ {
		if br.State() != breaker.Closed {
			t.Fatalf("breaker open after %d failures, want %d", i, redisstore.BreakerFailures)
		}
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 503 {
			t.Fatalf("failure %d: code %d", i+1, res.code)
		}
	}
	if br.State() != breaker.Open {
		t.Fatalf("breaker %s after %d failures", br.State(), redisstore.BreakerFailures)
	}
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 503 {
		t.Fatalf("while open: code %d", res.code)
	}

	srv.Restart()
	storetest.WaitFor(t, "breaker to close", func() bool { return br.State() == breaker.Closed })
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("after restart: %d", res.code)
	}
	expectKey(t, srv.Addr, "rl:api:*", "{192.0.2.1}") // counted in the restarted Redis
}

// A Redis that does not answer (stopped with SIGSTOP: connections stay
// open) trips the breaker through read timeouts.
func TestRedisHungTripsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, redisConfig(srv.Addr, 100, `"redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"50ms"},`), nil)
	br := h.rt.zones[0].breaker
	serve(h, newReq("192.0.2.1:1"))
	srv.Pause()
	defer srv.Resume()
	for i := 0; i < redisstore.BreakerFailures; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
			t.Fatalf("request %d (on_error open): code %d", i+1, res.code)
		}
	}
	if br.State() != breaker.Open {
		t.Fatalf("breaker %s after %d timeouts", br.State(), redisstore.BreakerFailures)
	}
	srv.Resume()
	storetest.WaitFor(t, "breaker to close", func() bool { return br.State() == breaker.Closed })
}

// sync_interval: three instances (own clients) decide locally and push to
// Redis once per interval; together they admit the limit, over-admitting at
// most (instances-1) x the per-interval budget (the README's bound).
func TestRedisSyncIntervalThreeInstances(t *testing.T) {
	srv := redistest.Start(t)
	clock := newClock()
	const events, instances = 600, 3
	var hs []*Handler
	for i := 0; i < instances; i++ {
		hs = append(hs, provision(t, fmt.Sprintf(`{"store":"redis","sync_interval":"1s",
			"redis":{"addresses":[%q],"pool_size":%d},
			"zones":[{"name":"sync","key":"k","algorithm":"fixed_window","limits":[{"events":%d,"window":"1m"}]}]}`,
			srv.Addr, i+1, events), clock))
	}
	stores := make([]*redisstore.SyncStore, instances)
	for i, h := range hs {
		stores[i] = h.rt.zones[0].store.(*redisstore.SyncStore)
	}
	budget := stores[0].Budget(0) // ceil(600 x 1s / 1m) = 10
	if budget != 10 {
		t.Fatalf("budget %d, want 10", budget)
	}
	// Stay inside one minute window: the fake clock starts 20s into one.
	admitted := 0
	for round := 0; round < 30; round++ {
		for _, h := range hs {
			for i := 0; i < 3*int(budget); i++ {
				if serve(h, newReq("192.0.2.1:1")).code == 200 {
					admitted++
				}
			}
		}
		clock.Advance(time.Second)
		for _, s := range stores {
			if err := s.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if max := events + (instances-1)*int(budget); admitted < events || admitted > max {
		t.Fatalf("admitted %d in one window, want %d to %d", admitted, events, max)
	}
	t.Logf("admitted %d of a limit of %d (bound %d)", admitted, events, events+(instances-1)*int(budget))
	for i, h := range hs {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
			t.Errorf("instance %d after the window filled: %d", i, res.code)
		}
	}
}

// A concurrency lease whose release fails (Redis holds writes a moment as
// its request ends, and the call times out: Redis drops it with the
// connection) is given back once Redis takes writes again, not held for
// its window (an hour here): the key is admitted again.
func TestRedisFailedReleaseRetried(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"200ms"},
		"zones":[{"name":"cc","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]}]}`, nil)
	release := serveHeld(h, newReq("192.0.2.1:1"))
	errs := counterValue(t, h.rt.zones[0].m.storeErrors) // the zone's metrics outlive a test
	mustDo(t, srv.Addr, "CLIENT", "PAUSE", "1500", "WRITE")
	if res := release(); res.code != 200 {
		t.Fatalf("request: %d", res.code)
	}
	if n := counterValue(t, h.rt.zones[0].m.storeErrors) - errs; n != 1 {
		t.Errorf("%v store errors counted for the failed release, want 1", n)
	}
	held := func() int64 { return leasesHeld(t, srv.Addr, "cc") } // reads go on during the pause
	if n := held(); n != 1 {
		t.Fatalf("%d leases held while Redis holds writes, want 1 (the release not applied)", n)
	}
	storetest.WaitFor(t, "the lease released on a retry", func() bool { return held() == 0 })
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("the key after its lease was released: %d, want 200", res.code)
	}
}

// A concurrency take that times out on a hung Redis (stopped here) is run
// by Redis once it goes on, after its request had its on_error answer:
// the lease it makes, known to no request, is given back once Redis
// answers, not held for its window (an hour here). The key is admitted
// again, up to its limit.
func TestRedisTimedOutTakeForgotten(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, `{"store":"redis","on_error":"open","redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"100ms"},
		"zones":[{"name":"cc_lost","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]}]}`, nil)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 { // the connection and the script
		t.Fatalf("first request: %d", res.code)
	}
	srv.Pause()
	res := serve(h, newReq("192.0.2.1:1"))
	srv.Resume()
	if res.code != 200 || !res.called {
		t.Fatalf("request on a hung Redis (on_error open): %d", res.code)
	}
	storetest.WaitFor(t, "the lost take's lease given back", func() bool { return leasesHeld(t, srv.Addr, "cc_lost") == 0 })
	release := serveHeld(h, newReq("192.0.2.1:1"))
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
		t.Errorf("a second request in flight: %d, want 429", res.code)
	}
	if res := release(); res.code != 200 {
		t.Errorf("the request in flight: %d, want 200", res.code)
	}
}

// leasesHeld is how many concurrency leases zone's keys hold in the Redis
// at addr.
func leasesHeld(t *testing.T, addr, zone string) int64 {
	t.Helper()
	probe := redis.NewClient(&redis.Options{Addr: addr})
	defer probe.Close()
	var n int64
	keys, err := probe.Keys(context.Background(), "rl:"+zone+":*:l").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		c, _ := probe.ZCard(context.Background(), k).Result()
		n += c
	}
	return n
}

// releaseWhilePaused serves a request through h that ends while the Redis
// at addr takes no writes (the test unpauses it), and checks that its
// lease's release waits for a retry.
func releaseWhilePaused(t *testing.T, h *Handler, addr string) {
	t.Helper()
	release := serveHeld(h, newReq("192.0.2.1:1"))
	mustDo(t, addr, "CLIENT", "PAUSE", "30000", "WRITE")
	if res := release(); res.code != 200 {
		t.Fatalf("request: %d", res.code)
	}
	if n := h.rt.releases.pending(); n != 1 {
		t.Fatalf("%d releases pending, want 1", n)
	}
}

// A reload (Cleanup) while a lease's release waits for a retry keeps the
// Redis client open until the retry gave it back.
func TestRedisCleanupKeepsPendingReleases(t *testing.T) {
	srv := redistest.Start(t)
	h := provisionIn(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"200ms"},
		"zones":[{"name":"cc_pend","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]}]}`, nil)
	releaseWhilePaused(t, h, srv.Addr)
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	mustDo(t, srv.Addr, "CLIENT", "UNPAUSE")
	storetest.WaitFor(t, "the lease released on a retry after the reload", func() bool { return leasesHeld(t, srv.Addr, "cc_pend") == 0 })
}

// A request that holds a concurrency lease and a count_status admission
// ends through settle: a lease release that fails there is queued for a
// retry as release's is, not dropped (its slot would stay taken for the
// window).
func TestRedisSettleQueuesFailedLeaseRelease(t *testing.T) {
	srv := redistest.Start(t)
	h := provisionIn(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"200ms"},
		"zones":[{"name":"cs_settle","key":"k","count_status":[500],"limits":[{"events":10,"window":"1h"}]},
			{"name":"cc_settle","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]}]}`, nil)
	releaseWhilePaused(t, h, srv.Addr)
	mustDo(t, srv.Addr, "CLIENT", "UNPAUSE")
	storetest.WaitFor(t, "the lease released on a retry", func() bool { return leasesHeld(t, srv.Addr, "cc_settle") == 0 })
}

// pending_releases reports a concurrency zone's releases that wait for a
// retry: 0 while none does, 1 while Redis does not answer, still 1 while a
// reload (Cleanup) lets it drain, and the series goes once it has.
func TestRedisMetricsPendingReleases(t *testing.T) {
	srv := redistest.Start(t)
	hs, reg := provisionCtx(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"read_timeout":"200ms"},
		"zones":[{"name":"cc_m","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]}]}`)
	h := hs[0]
	pending := func(when string, want float64) {
		t.Helper()
		if v, ok := metricValue(t, reg, "caddy_http_rate_limit_pending_releases", "zone=cc_m"); !ok || v != want {
			t.Fatalf("%s: pending_releases = %v (reported %v), want %v", when, v, ok, want)
		}
	}
	pending("before any request", 0)
	releaseWhilePaused(t, h, srv.Addr)
	pending("its release failed", 1)
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	pending("after Cleanup, draining", 1)
	mustDo(t, srv.Addr, "CLIENT", "UNPAUSE")
	storetest.WaitFor(t, "the release drained and its series gone", func() bool {
		_, ok := metricValue(t, reg, "caddy_http_rate_limit_pending_releases", "zone=cc_m")
		return !ok
	})
	if n := leasesHeld(t, srv.Addr, "cc_m"); n != 0 {
		t.Fatalf("%d leases held after the drain", n)
	}
}

// A stop gives back the concurrency leases of the requests still in
// flight: they end with the process, and their slots would otherwise stay
// taken in Redis for the window. Those of a config a reload unloaded
// before are given back too: by the stopped config's Cleanup (Caddy
// cleans up only the config it stops), or, when it has no rate_limit
// handler, by Caddy's exit callback.
func TestRedisStopReleasesLeasesInFlight(t *testing.T) {
	for _, c := range []struct {
		name         string
		reload, stop bool // a reload first; the stop is a config's Cleanup (else the exit callback)
	}{
		{"stop", false, true},
		{"stop after a reload", true, true},
		{"stop after a reload to no rate_limit", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			config := `{"store":"redis","on_error":"closed","redis":{"addresses":["` + srv.Addr + `"]},
				"zones":[{"name":"cc_stop","key":"k","algorithm":"concurrency","limits":[{"events":3,"window":"1h"}]}]}`
			h := provisionIn(t, config, nil)
			h.rt.opts.exiting = func() bool { return !c.reload }
			releases := []func() result{serveHeld(h, newReq("192.0.2.1:1"))}
			if c.reload {
				if err := h.Cleanup(); err != nil {
					t.Fatal(err)
				}
				if c.stop { // the config reloaded to, stopped
					h = provisionIn(t, config, nil)
					h.rt.opts.exiting = func() bool { return true }
					releases = append(releases, serveHeld(h, newReq("192.0.2.1:1")))
				}
			}
			if n := leasesHeld(t, srv.Addr, "cc_stop"); n != int64(len(releases)) {
				t.Fatalf("%d leases in Redis with %d requests in flight", n, len(releases))
			}
			if c.stop {
				if err := h.Cleanup(); err != nil {
					t.Fatal(err)
				}
			} else {
				releaseDrainingOnExit(context.Background())
			}
			if n := leasesHeld(t, srv.Addr, "cc_stop"); n != 0 {
				t.Fatalf("%d leases left in Redis after the stop, want 0", n)
			}
			for _, release := range releases {
				if res := release(); res.code != 200 {
					t.Fatalf("request: %d", res.code)
				}
			}
		})
	}
}

// A reload waits for the requests of the old config up to the longest
// window of its concurrency zones (their leases live that long in Redis),
// at least drainLimit.
func TestDrainForLeaseWindow(t *testing.T) {
	for _, c := range []struct {
		zones string
		want  time.Duration
	}{
		{`{"name":"a","key":"k","limits":[{"events":1,"window":"1h"}]}`, drainLimit},
		{`{"name":"a","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1m"}]}`, drainLimit},
		{`{"name":"a","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1h"}]},
			{"name":"b","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"2h"}]}`, 2 * time.Hour},
	} {
		h := provision(t, `{"zones":[`+c.zones+`]}`, newClock())
		if got := h.drainFor(); got != c.want {
			t.Errorf("%s: drainFor %s, want %s", c.zones, got, c.want)
		}
	}
}

// Cleanup (a reload) while a request is in flight: the Redis client the
// request uses stays open until it is done (here a concurrency lease that
// must be released in Redis), then it is closed.
func TestRedisCleanupWaitsForRequests(t *testing.T) {
	srv := redistest.Start(t)
	h := provisionIn(t, `{"store":"redis","on_error":"closed","redis":{"addresses":["`+srv.Addr+`"]},
		"zones":[{"name":"cc","key":"k","algorithm":"concurrency","limits":[{"events":1,"window":"1m"}]}]}`, nil)
	c := h.rt.redis
	release := serveHeld(h, newReq("192.0.2.1:1"))
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("client closed under a request in flight: %v", err)
	}
	if res := release(); res.code != 200 {
		t.Fatalf("request: %d", res.code)
	}
	// The lease was released in Redis: the in-flight set is empty.
	storetest.WaitFor(t, "the client to close", func() bool {
		return c.Ping(context.Background()).Err() == redis.ErrClosed
	})
	if n := leasesHeld(t, srv.Addr, "cc"); n != 0 {
		t.Errorf("%d leases held after the request ended", n)
	}
}
