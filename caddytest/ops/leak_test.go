package ops

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// connectedClients is Redis's count of client connections (INFO clients),
// the connection asking included.
func connectedClients(t *testing.T, addr string) int {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "clients")
	if err != nil {
		t.Fatalf("INFO clients: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("connected_clients %q", v)
			}
			return n
		}
	}
	t.Fatalf("no connected_clients in INFO clients:\n%s", info)
	return 0
}

// settledGoroutines waits (up to 10s) until runtime.NumGoroutine stops
// changing (the same over five readings 50ms apart) and returns it.
func settledGoroutines() int {
	closeIdle()
	last, same := runtime.NumGoroutine(), 0
	deadline := time.Now().Add(10 * time.Second)
	for same < 5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// closeIdle closes the idle connections this process keeps: caddytest's
// config checks use http.DefaultClient.
func closeIdle() {
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// TestFiftyReloadsLeakNothing loads two configs alternately, 50 times, each
// time sending requests through every kind of zone state: a memory zone
// (its store and sweeper), a redis zone with on_error local (the shared
// client, its breaker, the memory fallback) and a two-layer zone
// (sync_interval: its push loop). The configs differ in the limits (each
// load's responses say which config decided them; a zone's counts are kept
// across the loads, as a changed limit keeps them, so the limits are far
// above what 50 loads' requests add up to) and in the Redis pool_size (so
// the Redis client itself changes on every load and the old one must be
// closed when its last config goes). Afterwards the goroutines
// of the process are back to what one loaded config had (+5), and Redis
// has no more client connections than after the first load (+2).
func TestFiftyReloadsLeakNothing(t *testing.T) {
	srv := redistest.Start(t)
	cfg := func(limit, poolSize int) string {
		redisBlock := "\t\tstore redis\n" + caddytesting.RedisBlock(srv.Addr, fmt.Sprintf("pool_size %d", poolSize))
		return live.Globals("") + fmt.Sprintf(`
http://:%d {
	rate_limit /mem/* {
		zone ops_leak_mem {
			key {http.request.header.X-Client}
			limit %d 1h
		}
	}
	rate_limit /redis/* {
		zone ops_leak_redis {
			key {http.request.header.X-Client}
			limit %[2]d 1h
		}
%[3]s		on_error local
	}
	rate_limit /sync/* {
		zone ops_leak_sync {
			algorithm fixed_window
			key {http.request.header.X-Client}
			limit %[2]d 1h
		}
%[3]s		sync_interval 50ms
	}
	respond "ok"
}
`, live.HTTPPort, limit, redisBlock)
	}
	configs := []struct {
		text  string
		limit int
	}{{cfg(10000, 4), 10000}, {cfg(5000, 5), 5000}}

	// traffic sends requests through every zone and checks that they
	// were decided under the config's limit. A request may still reach
	// the previous config's server for a moment after POST /load returns
	// (its listening socket is closed in the background: see Caddy.RetryGet);
	// such an answer, with the previous limit, is asked again.
	traffic := func(limit int, what string) {
		t.Helper()
		for _, path := range []string{"/mem/x", "/redis/x", "/sync/x"} {
			for _, client := range []string{"a", "b"} {
				var r caddytesting.Response
				for try := 0; ; try++ {
					r = live.RetryGet(t, path, "X-Client", client)
					if r.Header.Get("X-RateLimit-Limit") == strconv.Itoa(limit) || try == 100 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				caddytesting.ExpectCode(t, r, 200, what+" "+path)
				if got := r.Header.Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
					t.Fatalf("%s %s: X-RateLimit-Limit %q, want %d (the config just loaded, 2 s after the load)", what, path, got, limit)
				}
			}
		}
	}

	live.Load(t, configs[0].text)
	traffic(configs[0].limit, "first load")

	// No garbage collection from here to the end of the checks: an
	// unreachable network connection is closed by its finalizer, and an
	// unreachable memory store stops its sweeper by a cleanup, so a
	// collection would hide a client or store that is never closed.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, gcs := ms.HeapAlloc, ms.NumGC

	baseG := settledGoroutines()
	baseC := connectedClients(t, srv.Addr)

	const loads = 50
	start := time.Now()
	for i := 1; i <= loads; i++ {
		c := configs[i%2]
		if err := live.Post(c.text, false); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		traffic(c.limit, fmt.Sprintf("load %d", i))
	}
	elapsed := time.Since(start)

	var g, c int
	okG := caddytesting.WaitFor(15*time.Second, func() bool {
		closeIdle()
		g = runtime.NumGoroutine()
		return g <= baseG+5
	})
	okC := caddytesting.WaitFor(15*time.Second, func() bool {
		c = connectedClients(t, srv.Addr)
		return c <= baseC+2
	})
	g = settledGoroutines()
	c = connectedClients(t, srv.Addr)
	runtime.ReadMemStats(&ms)
	t.Logf("%d loads in %v; goroutines %d after the first load, %d after %d more; Redis connected_clients %d after the first load, %d after (heap grew %d MB without collection)",
		loads, elapsed.Round(time.Millisecond), baseG, g, loads, baseC, c, (int64(ms.HeapAlloc)-int64(heap0))>>20)
	if ms.NumGC != gcs {
		// A memory limit (GOMEMLIMIT, or Caddy's automemlimit from the
		// cgroup) forced a collection: finalizers may have closed what
		// Destruct should have.
		t.Logf("note: %d garbage collections ran anyway", ms.NumGC-gcs)
	}
	if !okG || g > baseG+5 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("goroutines: %d after the first load, %d after %d more loads (allowed +5); stacks:\n%s", baseG, g, loads, buf[:n])
	}
	if !okC || c > baseC+2 {
		list, _ := redistest.Do(srv.Addr, "CLIENT", "LIST")
		t.Errorf("Redis connected_clients: %d after the first load, %d after %d more loads (allowed +2): old clients not closed\n%s", baseC, c, loads, list)
	}
}
