package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// TestReloadUnderLoad reloads Caddy ten times while clients keep sending
// requests to a zone with one static key, the zone itself unchanged: five
// times the identical config (forced with Cache-Control: must-revalidate),
// five times with another site's response changed. Not a count may be lost
// or doubled: afterwards the zone's remaining is exactly its limit minus
// the 200s the clients saw. Then a changed limit applies at once, from a
// fresh count. With the memory store (state carried in the reload pool)
// and the redis store (where the Redis count is the truth: the sliding
// log's own count in Redis equals the admissions too).
func TestReloadUnderLoad(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		reloadUnderLoad(t, "ops_reload_mem", "", nil)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { rdb.Close() })
		reloadUnderLoad(t, "ops_reload_redis", "\t\tstore redis\n"+caddytesting.RedisBlock(srv.Addr), rdb)
	})
}

// isReset reports whether err is a connection reset (or closed) by the
// server before it answered.
func isReset(err error) bool {
	return err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
}

func reloadUnderLoad(t *testing.T, zoneName, storeLines string, rdb *redis.Client) {
	const (
		limit     = 50_000
		workers   = 4
		perWorker = 10_000 // so that the zone is never exhausted: every 200 is a count
		reloads   = 10
	)
	cfg := func(limit int, other string) string {
		return live.Globals("") + fmt.Sprintf(`
http://:%d {
	rate_limit {
		zone %s {
			key static
			limit %d 1h
		}
%s	}
	respond "ok"
}
http://other.test:%d {
	respond %q
}
`, live.HTTPPort, zoneName, limit, storeLines, live.HTTPPort, other)
	}
	first := cfg(limit, "v0")
	live.Load(t, first)
	if r := live.Get(t, "/"); r.Code != 200 || caddytesting.Remaining(t, r) != limit-1 {
		t.Fatalf("first request: %d, remaining %q, want 200 and %d (a fresh zone)", r.Code, r.Header.Get("X-RateLimit-Remaining"), limit-1)
	}
	admitted := int64(1) // that first request

	var ok, denied, failed, reset atomic.Int64
	var errMu sync.Mutex
	var firstErr string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	defer stopAll() // also when the test fails half-way
	for range workers {
		wg.Go(func() {
			for i := 0; i < perWorker; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := live.Do("/")
				switch {
				case r.Err == nil && r.Code == 200:
					ok.Add(1)
				case r.Err == nil && r.Code == 429:
					denied.Add(1)
				case isReset(r.Err):
					// A connection reset by the old server's socket
					// closing (see Caddy.RetryGet): never decided.
					reset.Add(1)
				default:
					failed.Add(1)
					errMu.Lock()
					if firstErr == "" {
						firstErr = fmt.Sprintf("status %d, error %v, body %q", r.Code, r.Err, r.Body)
					}
					errMu.Unlock()
				}
			}
		})
	}
	answered := func() int64 { return ok.Load() + denied.Load() + failed.Load() }

	// Reload only while requests are being answered: before each reload,
	// wait for 20 more answers (bounded), so that every reload happens
	// under load.
	under := 0
	for i := 1; i <= reloads; i++ {
		n0 := answered()
		if caddytesting.WaitFor(20*time.Second, func() bool { return answered() >= n0+20 }) {
			under++
		}
		var err error
		if i%2 == 1 {
			err = live.Post(first, true) // the identical config, reloaded anyway
		} else {
			err = live.Post(cfg(limit, "v"+strconv.Itoa(i)), false)
		}
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if i%2 == 0 {
			if r := live.RetryGet(t, "/", "Host", "other.test"); r.Body != "v"+strconv.Itoa(i) {
				t.Fatalf("reload %d not in effect: other.test answers %q", i, r.Body)
			}
		}
	}
	n0 := answered()
	caddytesting.WaitFor(20*time.Second, func() bool { return answered() >= n0+20 })
	stopAll()

	admitted += ok.Load()
	t.Logf("%d reloads (%d with requests answered just before), %d requests admitted, %d denied, %d failed, %d connections reset before a request was read",
		reloads, under, ok.Load(), denied.Load(), failed.Load(), reset.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d requests answered neither 200 nor 429 during the reloads (first: %s)", failed.Load(), firstErr)
	}
	if denied.Load() > 0 {
		t.Fatalf("%d requests denied with %d of %d admitted: counts were doubled", denied.Load(), admitted, limit)
	}
	if under != reloads {
		t.Fatalf("only %d of %d reloads happened under load", under, reloads)
	}
	if ok.Load() < 100 {
		t.Fatalf("only %d requests admitted during the reloads: no real load", ok.Load())
	}

	// The count: exactly the admissions, none lost and none doubled (a
	// request whose connection was reset was never decided: were it
	// counted, remaining would be lower than this).
	r := live.RetryGet(t, "/")
	caddytesting.ExpectCode(t, r, 200, "after the reloads")
	admitted++
	if got, want := caddytesting.Remaining(t, r), limit-int(admitted); got != want {
		t.Fatalf("after %d reloads under load: remaining %d, want %d (limit %d - %d admitted): %d counts lost",
			reloads, got, want, limit, admitted, got-want)
	}
	if rdb != nil {
		// The sliding log keeps the units of its tier in the state
		// <prefix><zone>:{<key>}:sl:<digest>:m, "<latest instant> <units>".
		keys, err := rdb.Keys(context.Background(), "rl:"+zoneName+":{static}:sl:*:m").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("the zone's state in Redis: %v %v", keys, err)
		}
		state, err := rdb.Get(context.Background(), keys[0]).Result()
		var last, c int64
		if err == nil {
			_, err = fmt.Sscan(state, &last, &c)
		}
		if err != nil || c != admitted {
			t.Fatalf("Redis count %d (%v), want the %d admitted", c, err, admitted)
		}
	}

	// A lowered limit applies at once, against what was already counted
	// (the key's state carries over the change): once the new config
	// serves every new connection (the old listening socket is closed in
	// the background after POST /load returns, see Caddy.RetryGet), the
	// key, which used more than 3, is refused under the new limit of 3.
	if err := live.Post(cfg(3, "v-new"), false); err != nil {
		t.Fatal(err)
	}
	live.WaitServing(t, "v-new", "/", "Host", "other.test")
	r = live.RetryGet(t, "/")
	caddytesting.ExpectCode(t, r, 429, fmt.Sprintf("request under the new limit of 3, after %d admitted", admitted))
	if r.Header.Get("X-RateLimit-Limit") != "3" || caddytesting.Remaining(t, r) != 0 {
		t.Fatalf("request under the new limit: limit %q remaining %q, want 3 and 0",
			r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"))
	}
}
