package ops

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

var ttlAlgorithms = []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "gcra", "concurrency"}

// TestRedisKeysExpire runs traffic through Caddy with store redis for every
// algorithm (two tiers each, concurrency one; admitted, denied, and undone
// requests: admitted by the algorithm's zone, then denied by a later zone),
// a count_rejected zone, and a two-layer zone (sync_interval, fixed_window).
// A concurrency request is held in flight meanwhile. Then every key in
// Redis (SCAN) has a TTL: PTTL > 0, never -1, and none longer than its
// zone's state can need (twice the longest window, plus a minute). Every
// zone left keys, so no zone passes by writing nothing.
func TestRedisKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	// An upstream that holds /concurrency/slow until released.
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "upstream")
	}))
	defer upstream.Close()
	released := false
	releaseOnce := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer releaseOnce()

	var zones strings.Builder
	for _, a := range ttlAlgorithms {
		limits := "\t\t\tlimit 2 1h\n\t\t\tlimit 3 2h\n"
		if a == "concurrency" {
			limits = "\t\t\tlimit 2 2h\n"
		}
		fmt.Fprintf(&zones, "\t\tzone ops_ttl_%s {\n\t\t\tmatch {\n\t\t\t\tpath /%s /%[2]s/*\n\t\t\t}\n\t\t\talgorithm %[2]s\n\t\t\tkey {http.request.header.X-Client}\n%s\t\t}\n", a, a, limits)
	}
	zones.WriteString(`		zone ops_ttl_cr {
			match {
				path /cr
			}
			key {http.request.header.X-Client}
			count_rejected
			limit 2 1h
			limit 3 2h
		}
		zone ops_ttl_gate {
			match {
				header X-Gate *
			}
			key {http.request.header.X-Gate}
			limit 1 2h
		}
`)
	live.LoadSites(t, fmt.Sprintf(`
http://:%d {
	rate_limit {
%s		store redis
%s	}
	rate_limit /sync {
		zone ops_ttl_sync {
			algorithm fixed_window
			key {http.request.header.X-Client}
			limit 5 1h
		}
		store redis
%[3]s		sync_interval 100ms
	}
	handle /concurrency/slow {
		reverse_proxy %s
	}
	handle {
		respond "ok"
	}
}
`, live.HTTPPort, zones.String(), caddytesting.RedisBlock(srv.Addr), upstream.Listener.Addr().String()))

	// Hold one concurrency lease while the keys are scanned.
	slow := make(chan caddytesting.Response, 1)
	go func() { slow <- live.Do("/concurrency/slow", "X-Client", "held") }()
	select {
	case <-arrived:
	case r := <-slow:
		t.Fatalf("the slow request ended early: %d %v", r.Code, r.Err)
	case <-time.After(30 * time.Second):
		t.Fatal("the slow request never reached the upstream")
	}

	codes := func(path string, hdr ...string) (got []int) {
		for range 3 {
			got = append(got, live.Get(t, path, hdr...).Code)
		}
		return got
	}
	for _, p := range append(append([]string{}, ttlAlgorithms...), "cr") {
		// a: 2 admitted, 1 denied by the first tier (concurrency: each
		// request has ended before the next, so all are admitted).
		want := "[200 200 429]"
		if p == "concurrency" {
			want = "[200 200 200]"
		}
		if got := codes("/"+p, "X-Client", "a"); fmt.Sprint(got) != want {
			t.Errorf("%s, client a: %v, want %s", p, got, want)
		}
		// b: admitted by the zone, then the gate admits the first and
		// denies the others: the zone's admissions are undone.
		if got := codes("/"+p, "X-Client", "b", "X-Gate", "g-"+p); fmt.Sprint(got) != "[200 429 429]" {
			t.Errorf("%s, client b behind the gate: %v, want [200 429 429]", p, got)
		}
	}
	// The two-layer zone admits at most ceil(events x interval / window)
	// = 1 unit per interval and key (its budget, see redisstore/TWO_LAYER.md): send
	// until 5 are admitted, then the limit holds (remaining 0).
	admitted := 0
	if !caddytesting.WaitFor(20*time.Second, func() bool {
		r := live.Get(t, "/sync", "X-Client", "s")
		if r.Code == 200 {
			admitted++
		}
		return admitted == 5
	}) {
		t.Fatalf("two-layer zone: %d of 5 admitted in 20s", admitted)
	}
	if r := live.Get(t, "/sync", "X-Client", "s"); r.Code != 429 || caddytesting.Remaining(t, r) != 0 {
		t.Errorf("two-layer zone, 6th request: %d remaining %q, want 429 and 0", r.Code, r.Header.Get("X-RateLimit-Remaining"))
	}

	// Every zone's keys, once the two-layer store has pushed.
	keysOf := func() map[string][]string {
		m := make(map[string][]string)
		iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			for _, z := range append(append([]string{}, ttlAlgorithms...), "cr", "gate", "sync") {
				if strings.HasPrefix(k, "rl:ops_ttl_"+z+":") {
					m[z] = append(m[z], k)
				}
			}
			m[""] = append(m[""], k)
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		return m
	}
	var keys map[string][]string
	caddytesting.WaitFor(10*time.Second, func() bool {
		keys = keysOf()
		return len(keys["sync"]) > 0
	})

	check := func(when string, keys []string) {
		t.Helper()
		for _, k := range keys {
			ttl, err := rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatalf("PTTL %s: %v", k, err)
			}
			switch {
			case ttl == -2: // go-redis gives -2 and -1 as they are
				// expired between SCAN and PTTL: fine
			case ttl < 0:
				t.Errorf("%s: key %s has no TTL (PTTL %v)", when, k, ttl)
			case ttl > 2*2*time.Hour+time.Minute:
				t.Errorf("%s: key %s has PTTL %v, more than its state can need", when, k, ttl)
			}
		}
	}
	for _, z := range append(append([]string{}, ttlAlgorithms...), "cr", "gate", "sync") {
		if len(keys[z]) == 0 {
			t.Errorf("zone ops_ttl_%s left no key in Redis", z)
		}
	}
	check("with a lease held", keys[""])
	t.Logf("%d keys in Redis checked", len(keys[""]))

	// The lease released: the concurrency keys still expire.
	releaseOnce()
	if r := <-slow; r.Code != 200 || r.Body != "upstream" {
		t.Fatalf("the slow request: %d %q %v", r.Code, r.Body, r.Err)
	}
	keys = keysOf()
	check("after the lease was released", keys[""])
}
