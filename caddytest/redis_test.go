package integration

// Integration tests of the redis store through a real Caddy and real
// redis-server processes (internal/redistest): several handlers with clients
// of their own sharing one exact count, on one node and on a Redis Cluster;
// Redis stopped, restarted and hung under load; a Cluster failover.
//
// Every test starts its own Redis (or Cluster), so counts never leak from one
// test into the next, and uses zone names of its own. Windows are long (10 s,
// or an hour for the buckets) so results never depend on timing. Latencies
// are logged as figures, never asserted: what a test asserts (statuses,
// counts, calls made) holds on a loaded machine.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// loadClient is an HTTP client for concurrent load against Caddy: it keeps
// a connection per concurrent caller alive (caddytest's client keeps two per
// host, so a burst would keep dialing), which also keeps latency
// measurements free of connection set-up.
func loadClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// hit is one request's outcome.
type hit struct {
	host       string
	key        string
	start, end time.Time
	code       int    // -1: transport error
	remaining  string // X-RateLimit-Remaining ("": not decided by a store)
	err        string
}

// send requests path on Caddy with the given Host (empty: none) and X-Key
// (empty: none).
func send(c *http.Client, host, path, key string) hit {
	h := hit{host: host, key: key, start: time.Now()}
	req, err := http.NewRequest("GET", live.URL(path), nil)
	if err != nil {
		panic(err)
	}
	if host != "" {
		req.Host = host
	}
	if key != "" {
		req.Header.Set("X-Key", key)
	}
	res, err := c.Do(req)
	if err != nil {
		h.code, h.err, h.end = -1, err.Error(), time.Now()
		return h
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	h.end = time.Now()
	h.code = res.StatusCode
	h.remaining = res.Header.Get("X-RateLimit-Remaining")
	return h
}

// codes counts hits by status code.
func codes(hs []hit) map[int]int {
	m := make(map[int]int)
	for _, h := range hs {
		m[h.code]++
	}
	return m
}

// firstError is the first transport error among hs, for messages.
func firstError(hs []hit) string {
	for _, h := range hs {
		if h.err != "" {
			return h.err
		}
	}
	return ""
}

// p99 is the 99th percentile of ds (nearest rank).
func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(0.99*float64(len(s))))-1]
}

// sequentialLatency sends n requests one after another and returns their
// p99 and the hits.
func sequentialLatency(c *http.Client, n int, host, path, key string) (time.Duration, []hit) {
	ds := make([]time.Duration, 0, n)
	hs := make([]hit, 0, n)
	for i := 0; i < n; i++ {
		h := send(c, host, path, key)
		ds = append(ds, h.end.Sub(h.start))
		hs = append(hs, h)
	}
	return p99(ds), hs
}

// loader keeps workers goroutines sending requests in a loop, round-robin
// over hosts, with the X-Key the test sets, and records every outcome.
type loader struct {
	c     *http.Client
	hosts []string
	path  string
	key   atomic.Pointer[string]

	mu   sync.Mutex
	hits []hit

	stop    chan struct{}
	stopped bool
	wg      sync.WaitGroup
}

func startLoad(t *testing.T, c *http.Client, workers int, hosts []string, path, key string) *loader {
	l := &loader{c: c, hosts: hosts, path: path, stop: make(chan struct{})}
	l.key.Store(&key)
	var n atomic.Int64
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				host := l.hosts[int(n.Add(1))%len(l.hosts)]
				h := send(l.c, host, l.path, *l.key.Load())
				l.mu.Lock()
				l.hits = append(l.hits, h)
				l.mu.Unlock()
				// A breath between requests: load, not a CPU hog that
				// would starve redis-server and Caddy on 2 cores.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}

func (l *loader) setKey(k string) { l.key.Store(&k) }

// Stop stops the workers and waits for their last requests.
func (l *loader) Stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
}

// all returns every hit so far.
func (l *loader) all() []hit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hits)
}

// since returns the hits whose request started at or after t.
func (l *loader) since(t time.Time) []hit {
	var out []hit
	for _, h := range l.all() {
		if !h.start.Before(t) {
			out = append(out, h)
		}
	}
	return out
}

// waitHits waits until cond holds for the hits started at or after from,
// failing the test after limit.
func (l *loader) waitHits(t *testing.T, from time.Time, limit time.Duration, what string, cond func([]hit) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		hs := l.since(from)
		if cond(hs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %d requests, codes %v, first error %q", limit, what, len(hs), codes(hs), firstError(hs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// storeErrors is the store errors counted in zone (0 before the first).
func storeErrors(t *testing.T, zone string) float64 {
	t.Helper()
	return max(caddytesting.Value(live.Scrape(t), "caddy_http_rate_limit_store_errors_total", "zone", zone), 0)
}

// redisKeys lists the keys matching pattern on the node at addr. An error
// fails t; with t nil (a poll, which asks again) it lists no key.
func redisKeys(t *testing.T, addr, pattern string) []string {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	keys, err := c.Keys(context.Background(), pattern).Result()
	if err != nil && t != nil {
		t.Helper()
		t.Fatalf("KEYS %s on %s: %v", pattern, addr, err)
	}
	return keys
}

// --- 1. exact across instances ---------------------------------------------

var exactHosts = []string{"a.test", "b.test", "c.test"}

// exactSites is three sites, one per host, each with a rate_limit handler of
// its own (different pool_size: different Redis settings, so each has a
// client and stores of its own, like three Caddy instances) sharing the
// Redis at addrs. Every algorithm has a zone, chosen by path, with the
// static key "shared", so that all three count against one Redis key.
//
// on_error closed and a long read_timeout: a Redis failure shows up as a
// 503 (which the test refuses) instead of an admission that would look like
// over-counting.
func exactSites(prefix string, addrs []string, upstream string) string {
	var b strings.Builder
	for i, host := range exactHosts {
		fmt.Fprintf(&b, "http://%s {\n\trate_limit {\n", host)
		for _, alg := range []string{"sliding_log", "fixed_window", "token_bucket", "gcra"} {
			limit := "limit 100 10s"
			if alg == "token_bucket" || alg == "gcra" {
				// Refill 100/h = one token per 36 s: a run of a few
				// seconds cannot refill a whole token, so exactly
				// the burst is admitted.
				limit = "limit 100 1h\n\t\t\tburst 100"
			}
			fmt.Fprintf(&b, "\t\tzone %s_%s {\n\t\t\tmatch {\n\t\t\t\tpath /%s\n\t\t\t}\n\t\t\tkey shared\n\t\t\talgorithm %s\n\t\t\t%s\n\t\t}\n",
				prefix, alg, alg, alg, limit)
		}
		fmt.Fprintf(&b, "\t\tzone %s_concurrency {\n\t\t\tmatch {\n\t\t\t\tpath /concurrency\n\t\t\t}\n\t\t\tkey shared\n\t\t\talgorithm concurrency\n\t\t\tlimit 10 1m\n\t\t}\n", prefix)
		fmt.Fprintf(&b, "\t\tstore redis\n%s\t\ton_error closed\n\t}\n",
			caddytesting.RedisBlock(strings.Join(addrs, " "), fmt.Sprintf("pool_size %d", 8+i)))
		fmt.Fprintf(&b, "\thandle /concurrency {\n\t\treverse_proxy %s\n\t}\n\trespond \"ok\"\n}\n", upstream)
	}
	return b.String()
}

// burst sends n requests to path from clients concurrent callers, spread
// round-robin over exactHosts.
func burst(c *http.Client, clients, n int, path string) []hit {
	var next atomic.Int64
	hits := make([]hit, n)
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				hits[i] = send(c, exactHosts[i%len(exactHosts)], path, "")
			}
		}()
	}
	wg.Wait()
	return hits
}

// fixedWindow is the window of the fixed_window zones.
const fixedWindow = 10 * time.Second

// awaitWindowRoom returns once at least room is left in the current
// fixedWindow, aligned to the Unix epoch as fixed_window's windows are (in
// Redis's clock, which on this machine is ours). A run that crossed a
// boundary would rightly admit up to twice the limit; waiting for the next
// window when this one is nearly over keeps the run inside one.
func awaitWindowRoom(room time.Duration) {
	now := time.Now()
	end := now.Truncate(fixedWindow).Add(fixedWindow)
	if end.Sub(now) < room {
		time.Sleep(time.Until(end) + 50*time.Millisecond)
	}
}

// inflightUpstream is an upstream that holds each request hold and records
// the most requests in flight at once.
type inflightUpstream struct {
	*httptest.Server
	cur, max atomic.Int64
	served   atomic.Int64
}

func newInflightUpstream(t *testing.T, hold time.Duration) *inflightUpstream {
	u := &inflightUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.cur.Add(1)
		for {
			m := u.max.Load()
			if n <= m || u.max.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(hold)
		u.cur.Add(-1)
		u.served.Add(1)
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(u.Close)
	return u
}

// Three handlers with clients and stores of their own (three Caddy
// instances' worth) share one Redis count: 64 concurrent clients spread over
// them get exactly the limit admitted, with every algorithm, on one node and
// on a Redis Cluster; concurrency never lets more than its limit in flight.
// TestRedisReloadKeepsCounts: with store redis too, a reload that changes
// a zone's limit keeps the zone's keys, and the new limit applies at once
// to what was counted.
func TestRedisReloadKeepsCounts(t *testing.T) {
	srv := redistest.Start(t)
	testReloadKeepsCounts(t, "rx_reload", "\t\tstore redis\n"+caddytesting.RedisBlock(srv.Addr)+"\t\ton_error closed\n")
}

// TestRedisLeaseReloadNewLimits: with leasing, a reload that changes a
// zone's limits applies them at once; the lease's keys name the limits, so
// the zone counts afresh under them.
func TestRedisLeaseReloadNewLimits(t *testing.T) {
	srv := redistest.Start(t)
	site := func(events int) string {
		return live.Site(caddytesting.Zone("rx_lease_relimit", caddytesting.ClientKey, fmt.Sprintf("limit %d 1h", events))+
			"\t\tstore redis\n"+caddytesting.RedisBlock(srv.Addr)+"\t\tlease 1s\n\t\ton_error closed\n", respondOK)
	}
	live.LoadSites(t, site(5))
	live.ExpectCodes(t, "/", clientA(), 200, 200)
	for _, events := range []int{6, 2} {
		live.LoadSites(t, site(events))
		codes := make([]int, events+1)
		for i := range codes {
			codes[i] = 200
		}
		codes[events] = 429
		r := live.ExpectCodes(t, "/", clientA(), codes...)
		caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", strconv.Itoa(events))
	}
}

func TestRedisExactAcrossInstances(t *testing.T) {
	const (
		clients  = 64
		requests = 300
		limit    = 100
	)
	run := func(t *testing.T, prefix string, addrs []string) {
		up := newInflightUpstream(t, 50*time.Millisecond)
		live.LoadSites(t, exactSites(prefix, addrs, up.Listener.Addr().String()))
		c := loadClient(t)

		for _, alg := range []string{"sliding_log", "fixed_window", "token_bucket", "gcra"} {
			t.Run(alg, func(t *testing.T) {
				var window int64
				if alg == "fixed_window" {
					// The run takes well under a second; 4 s of room is
					// plenty even under -race.
					awaitWindowRoom(4 * time.Second)
					window = time.Now().UnixNano() / int64(fixedWindow)
				}
				start := time.Now()
				hits := burst(c, clients, requests, "/"+alg)
				took := time.Since(start)
				if alg == "fixed_window" && time.Now().UnixNano()/int64(fixedWindow) != window {
					t.Fatalf("the run (%v) crossed a fixed window boundary: the count is not comparable", took)
				}
				got := codes(hits)
				if got[200] != limit || got[429] != requests-limit {
					t.Fatalf("%d requests over %d handlers: codes %v, want exactly %d x 200 and %d x 429 (first error %q)",
						requests, len(exactHosts), got, limit, requests-limit, firstError(hits))
				}
				// Every handler took part (the count is shared, not
				// per handler).
				perHost := make(map[string]int)
				for _, h := range hits {
					if h.code == 200 {
						perHost[h.host]++
					}
				}
				if len(perHost) != len(exactHosts) {
					t.Errorf("admissions by host %v: not every handler admitted", perHost)
				}
				t.Logf("%s: %d admitted of %d in %v, by host %v", alg, got[200], requests, took, perHost)
			})
		}

		t.Run("concurrency", func(t *testing.T) {
			up.max.Store(0)
			before := up.served.Load()
			hits := burst(c, clients, requests, "/concurrency")
			got := codes(hits)
			if got[200]+got[429] != requests {
				t.Fatalf("codes %v: want only 200 and 429 (first error %q)", got, firstError(hits))
			}
			if m := up.max.Load(); m > 10 {
				t.Fatalf("%d requests in flight at the upstream at once, limit 10", m)
			}
			if got[200] < 10 || got[429] == 0 {
				t.Fatalf("codes %v: want at least 10 admitted and some 429", got)
			}
			if served := up.served.Load() - before; served != int64(got[200]) {
				t.Errorf("upstream served %d, Caddy answered %d x 200", served, got[200])
			}
			t.Logf("concurrency: %d admitted, %d refused, at most %d in flight", got[200], got[429], up.max.Load())
			// Every lease was given back: a request gets through again.
			// (The handler releases after the response is written:
			// allow it a moment.)
			deadline := time.Now().Add(5 * time.Second)
			for {
				hs := burst(c, 10, 10, "/concurrency")
				if codes(hs)[200] == 10 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("leases not released: 10 sequential-ish requests got %v", codes(hs))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}

	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		run(t, "rx1", []string{srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 1)
		run(t, "rxc", cl.Addrs)
	})
}

// --- 2. Redis down under load -------------------------------------------------

// downSites is two sites (two handlers with clients of their own) limiting
// each X-Key to limit per hour in the zone, on the Redis at addr.
func downSites(zone, addr, onError string, limit int) string {
	var b strings.Builder
	for i, host := range []string{"a.test", "b.test"} {
		fmt.Fprintf(&b, `
http://%s {
	rate_limit {
		zone %s {
			key {http.request.header.X-Key}
			limit %d 1h
		}
		store redis
		redis {
			address %s
			pool_size %d
		}
		on_error %s
	}
	respond "ok"
}
`, host, zone, limit, addr, 8+i, onError)
	}
	return b.String()
}

// sharedAgain sends a request to a.test then one to b.test with a fresh key
// and reports whether the second saw the first's admission: both decided
// (a remaining header), b's remaining one less than a's.
func sharedAgain(c *http.Client, key string) bool {
	a := send(c, "a.test", "/", key)
	b := send(c, "b.test", "/", key)
	if a.code != 200 || b.code != 200 || a.remaining == "" || b.remaining == "" {
		return false
	}
	ra, _ := strconv.Atoi(a.remaining)
	rb, _ := strconv.Atoi(b.remaining)
	return rb == ra-1
}

// Redis stopped under load (8 goroutines over two handlers): on_error open
// lets everything through, closed answers 503, local limits the instance on
// its own; never a 500. With the breaker open, requests do not call Redis
// (connections counted). Restarted (empty, without its scripts), Redis
// decides shared counts again (within 10 s; the time it took is logged).
func TestRedisDownUnderLoad(t *testing.T) {
	const limit = 20
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			zone := "rd_" + mode
			live.LoadSites(t, downSites(zone, srv.Addr, mode, limit))
			c := loadClient(t)
			hosts := []string{"a.test", "b.test"}

			// Before: Redis decides, shared by both handlers: the key
			// "pre" is refused beyond limit in all.
			l := startLoad(t, c, 8, hosts, "/", "pre")
			t0 := time.Now()
			l.waitHits(t, t0, 10*time.Second, "requests before the stop", func(hs []hit) bool { return len(hs) >= 3*limit })
			stopping := time.Now()
			srv.Stop()
			stopped := time.Now()
			l.setKey("post")
			pre := l.since(t0)
			var preBefore []hit // completed before the stop began: all decided by Redis
			for _, h := range pre {
				if h.end.Before(stopping) {
					preBefore = append(preBefore, h)
				}
			}
			if got := codes(preBefore); got[200] > limit || got[429] == 0 || got[200]+got[429] != len(preBefore) {
				t.Fatalf("before the stop, %d requests with one key over two handlers: codes %v, want at most %d x 200 in all, the rest 429",
					len(preBefore), got, limit)
			}

			// After: requests started once Redis was gone.
			l.waitHits(t, stopped, 10*time.Second, "requests after the stop", func(hs []hit) bool {
				per := make(map[string]int)
				for _, h := range hs {
					if h.key == "post" {
						per[h.host]++
					}
				}
				return per["a.test"] >= 3*limit && per["b.test"] >= 3*limit
			})
			l.Stop()
			// The requests with key "post": all started once Redis was
			// gone (the key changed after Stop returned).
			var post []hit
			for _, h := range l.all() {
				if h.key == "post" {
					post = append(post, h)
				}
			}
			got := codes(post)
			switch mode {
			case "open":
				if got[200] != len(post) {
					t.Fatalf("on_error open, Redis down: codes %v over %d requests, want all 200 (first error %q)", got, len(post), firstError(post))
				}
			case "closed":
				if got[503] != len(post) {
					t.Fatalf("on_error closed, Redis down: codes %v over %d requests, want all 503", got, len(post))
				}
			case "local":
				// The two handlers name one zone: they share its
				// fallback count on this instance.
				if got[200] != limit || got[200]+got[429] != len(post) {
					t.Fatalf("on_error local, Redis down: codes %v over %d requests, want exactly %d x 200 (the instance's limit) and the rest 429", got, len(post), limit)
				}
			}
			for code, n := range codes(l.all()) {
				if code >= 500 && !(mode == "closed" && code == 503) || code < 0 {
					t.Fatalf("%d responses with status %d during the test (first error %q)", n, code, firstError(l.all()))
				}
			}
			t.Logf("on_error %s: %d requests after the stop: %v", mode, len(post), got)

			// The breaker is open (far more than 5 failures since the
			// stop): requests do not touch Redis. A refused connection
			// on loopback costs microseconds, so latency alone would not
			// show it: a listener on Redis's port counts the
			// connections made while 500 requests pass (only the
			// breaker's probe, every 250ms, should connect), and closes
			// each at once (Redis still failing).
			ln, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				t.Fatalf("listening on the stopped Redis's port: %v", err)
			}
			var accepts atomic.Int64
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					accepts.Add(1)
					conn.Close()
				}
			}()
			latStart := time.Now()
			p, hs := sequentialLatency(c, 500, "a.test", "/", "lat")
			elapsed := time.Since(latStart)
			ln.Close()
			// Each handler's breaker probes (and so may connect) once
			// per probe interval; a request calling Redis would connect
			// once per request (every connection is closed at once).
			probes := 2 * int64(elapsed/(250*time.Millisecond)+1)
			t.Logf("on_error %s: %d connections to Redis's port during the 500 requests (%v, probes allowed %d)", mode, accepts.Load(), elapsed, probes)
			if n := accepts.Load(); n > probes+10 {
				t.Errorf("%d connections to Redis's port during 500 requests with the breaker open (%v: at most %d probes): requests still call Redis", n, elapsed, probes)
			}
			want := map[string]int{"open": 200, "closed": 503}[mode]
			for i, h := range hs {
				w := want
				if mode == "local" {
					w = map[bool]int{true: 200, false: 429}[i < limit]
				}
				if h.code != w {
					t.Fatalf("latency run, request %d: status %d, want %d (%s)", i+1, h.code, w, h.err)
				}
			}
			t.Logf("on_error %s: p99 of 500 sequential requests with Redis down: %v (a figure, not asserted)", mode, p)

			// Restart: an empty Redis, without the scripts (NOSCRIPT,
			// then SCRIPT LOAD). The breaker's probe closes it, and counts are
			// shared again.
			srv.Restart()
			restarted := time.Now()
			var took time.Duration
			for i := 0; ; i++ {
				// In Redis: with on_error local the two handlers share
				// the fallback count too.
				key := fmt.Sprintf("share-%d", i)
				if sharedAgain(c, key) && len(redisKeys(nil, srv.Addr, "rl:"+zone+":{"+key+"}*")) > 0 {
					took = time.Since(restarted)
					break
				}
				if time.Since(restarted) > 10*time.Second {
					t.Fatalf("decisions not shared again 10s after the restart")
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("on_error %s: decisions shared again %v after the restart", mode, took)
			if keys := redisKeys(t, srv.Addr, "rl:"+zone+":{share-*"); len(keys) == 0 {
				t.Errorf("no count in the restarted Redis")
			}
		})
	}
}

// --- 3. slow Redis --------------------------------------------------------------

// A Redis that hangs (SIGSTOP: connections open, no answer) costs a request
// at most the read timeout until the breaker trips; requests still complete
// (on_error open: 200, never a 500), and once the breaker is open they are
// fast again. Resumed, Redis decides again.
func TestRedisSlowTripsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	live.LoadSites(t, fmt.Sprintf(`
http:// {
	rate_limit {
		zone rs_slow {
			key {http.request.header.X-Key}
			limit 1000000 1h
		}
		store redis
		redis {
			address %s
			read_timeout 50ms
		}
		on_error open
	}
	respond "ok"
}`, srv.Addr))
	c := loadClient(t)
	// Redis decides before the pause: three requests with the headers of
	// a decision. A call may time out at 50ms on a loaded machine: that
	// request gets on_error open (200, no headers), and the next tries.
	for decided, deadline := 0, time.Now().Add(10*time.Second); decided < 3; {
		h := send(c, "", "/", "k")
		if h.code != 200 {
			t.Fatalf("before the pause: status %d (%s)", h.code, h.err)
		}
		if h.remaining != "" {
			decided++
		} else if time.Now().After(deadline) {
			t.Fatalf("before the pause: Redis decided %d of the requests of 10s", decided)
		}
	}

	srv.Pause()
	t.Cleanup(srv.Resume) // before the Stop of redistest's cleanup (cleanups run last first)
	// Paused for sure: PING gets no answer.
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	deadline := time.Now().Add(5 * time.Second)
	for probe.Ping(context.Background()).Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server still answers 5s after SIGSTOP")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The first request waits for Redis, up to the read timeout.
	first := send(c, "", "/", "k")
	if first.code != 200 || first.remaining != "" {
		t.Fatalf("first request, Redis hung: status %d, remaining %q (want 200 without a decision) %s", first.code, first.remaining, first.err)
	}
	if d := first.end.Sub(first.start); d < 40*time.Millisecond {
		t.Errorf("first request with Redis hung took %v: it should have waited for the 50ms read timeout", d)
	} else {
		t.Logf("first request with Redis hung: %v", d)
	}

	// Under load the breaker trips; every request completes with 200.
	paused := time.Now()
	l := startLoad(t, c, 8, []string{""}, "/", "k")
	l.waitHits(t, paused, 10*time.Second, "requests with Redis hung", func(hs []hit) bool { return len(hs) >= 100 })
	l.Stop()
	hs := l.all()
	var slow []time.Duration
	for _, h := range hs {
		if h.code != 200 {
			t.Fatalf("Redis hung, on_error open: status %d (%s); codes %v", h.code, h.err, codes(hs))
		}
		if d := h.end.Sub(h.start); d > 40*time.Millisecond {
			slow = append(slow, d)
		}
	}
	t.Logf("with Redis hung: %d requests under load, %d of them over 40ms (waited for Redis)", len(hs), len(slow))

	// The breaker is open: requests are decided by on_error without
	// calling Redis, so the zone's store errors (each a call that failed)
	// stop growing. Counted, not timed: a hung Redis costs no connection
	// that a listener could count.
	errsBefore := storeErrors(t, "rs_slow")
	p, seq := sequentialLatency(c, 200, "", "/", "k")
	for i, h := range seq {
		if h.code != 200 || h.remaining != "" {
			t.Fatalf("breaker open, request %d: status %d, remaining %q (want 200 without a decision) %s", i+1, h.code, h.remaining, h.err)
		}
	}
	if errsAfter := storeErrors(t, "rs_slow"); errsAfter != errsBefore {
		t.Errorf("store errors went from %v to %v during 200 requests with the breaker open: requests still call Redis", errsBefore, errsAfter)
	}
	t.Logf("p99 of 200 sequential requests with Redis hung and the breaker open: %v (a figure, not asserted)", p)

	srv.Resume()
	resumed := time.Now()
	for {
		h := send(c, "", "/", "k")
		if h.code == 200 && h.remaining != "" {
			break
		}
		if h.code != 200 {
			t.Fatalf("after resume: status %d (%s)", h.code, h.err)
		}
		if time.Since(resumed) > 10*time.Second {
			t.Fatal("no decision from Redis 10s after it resumed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("decisions from Redis again %v after it resumed", time.Since(resumed))
}

// --- 4. Cluster failover ----------------------------------------------------------

// slotOwner returns the master serving slot according to the node at addr,
// and that master's replicas.
func slotOwner(addr string, slot int64) (string, []string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	shards, err := c.ClusterShards(context.Background()).Result()
	if err != nil {
		return "", nil, err
	}
	for _, sh := range shards {
		served := false
		for _, r := range sh.Slots {
			served = served || r.Start <= slot && slot <= r.End
		}
		if !served {
			continue
		}
		var master string
		var reps []string
		for _, n := range sh.Nodes {
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			switch {
			case n.Role == "master" && n.Health == "online":
				master = addr
			case n.Role == "replica":
				reps = append(reps, addr)
			}
		}
		if master != "" {
			return master, reps, nil
		}
	}
	return "", nil, fmt.Errorf("slot %d not served", slot)
}

// The master holding the test key is killed under load: its replica takes
// over, and decisions continue on it (counts in the new master), with no
// 5xx at any time (on_error open while the slot has no master).
func TestRedisClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	const zone = "rf_failover"
	live.LoadSites(t, fmt.Sprintf(`
http:// {
	rate_limit {
		zone %s {
			key k
			limit 1000000 1h
		}
		store redis
		redis {
			address %s
		}
		on_error open
	}
	respond "ok"
}`, zone, strings.Join(cl.Addrs, " ")))
	c := loadClient(t)
	if h := send(c, "", "/", ""); h.code != 200 || h.remaining != "999999" {
		t.Fatalf("first request: status %d, remaining %q, want 200 and 999999 (%s)", h.code, h.remaining, h.err)
	}

	// The Redis keys of key "k" carry the hash tag {k} (redisstore.EscapeKey
	// keeps "k" as is): their slot is that of "k".
	s, err := redistest.Do(cl.Addrs[0], "CLUSTER", "KEYSLOT", "k")
	if err != nil {
		t.Fatal(err)
	}
	slot, _ := strconv.ParseInt(s, 10, 64)
	// Right after the cluster is created a replica may not be listed yet
	// (still syncing with its master): wait for it.
	var master string
	var replicas []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		master, replicas, err = slotOwner(cl.Addrs[0], slot)
		if err == nil && len(replicas) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d: master %s, replicas %v (%v): want one replica", slot, master, replicas, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	replica := replicas[0]
	if keys := redisKeys(t, master, "rl:"+zone+":{k}*"); len(keys) == 0 {
		t.Fatalf("no key of zone %s on %s, the master of slot %d", zone, master, slot)
	}
	var victim *redistest.Server
	for _, srv := range cl.Servers {
		if srv.Addr == master {
			victim = srv
		}
	}
	if victim == nil {
		t.Fatalf("master %s is not one of the cluster's servers %v", master, cl.Addrs)
	}
	// The replica must have the key before the master goes, or the
	// failover would start the count afresh (asynchronous replication). It
	// syncs first a few seconds after the cluster starts, later on a busy
	// machine: wait for its link, then for the key.
	cl.WaitSynced(t)
	deadline = time.Now().Add(10 * time.Second)
	for len(redisKeys(nil, replica, "rl:"+zone+":{k}*")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s never got the key", replica)
		}
		time.Sleep(20 * time.Millisecond)
	}

	l := startLoad(t, c, 8, []string{""}, "/", "")
	l.waitHits(t, time.Now(), 10*time.Second, "load before the kill", func(hs []hit) bool { return len(hs) >= 50 })
	victim.Stop()
	killed := time.Now()

	// The replica takes over once the other masters agree the master is
	// down (cluster-node-timeout 2000 in redistest) and it wins the
	// election.
	var failover time.Duration
	for {
		m, _, err := slotOwner(replica, slot)
		if err == nil && m == replica {
			failover = time.Since(killed)
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("replica %s not master of slot %d 30s after the master was killed (last: %q, %v)", replica, slot, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover: replica %s master of slot %d %v after the master was killed", replica, slot, failover)

	// Decisions continue: a request started after the failover is decided
	// by Redis again (a remaining header; on_error open writes none),
	// within a few seconds of the promotion. (go-redis alone refreshes a
	// Cluster client's slot map only on MOVED/ASK or every 60 s
	// (ClusterStateReloadInterval), and a request to a dead master gets
	// neither: the handler must ask for a reload when the slot's node
	// fails, e.g. ClusterClient.ReloadState in the breaker's probe.)
	promoted := time.Now()
	const resumeLimit = 5 * time.Second
	var resumed time.Duration
	for resumed == 0 {
		for _, h := range l.since(promoted) {
			if h.code == 200 && h.remaining != "" {
				resumed = h.end.Sub(promoted)
				break
			}
		}
		if resumed == 0 && time.Since(promoted) > resumeLimit {
			l.Stop()
			hs := l.since(promoted)
			t.Fatalf("no decision by Redis %v after the replica %s was promoted (%d requests since, codes %v, all let through by on_error open): "+
				"the Cluster client still routes slot %d to the dead master %s (go-redis reloads the slot map only on MOVED/ASK or every 60s)",
				resumeLimit, replica, len(hs), codes(hs), slot, master)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Stop()
	all := l.all()
	if got := codes(all); got[200] != len(all) {
		t.Fatalf("during the failover: codes %v over %d requests, want all 200 (first error %q)", got, len(all), firstError(all))
	}
	undecided := 0
	for _, h := range l.since(killed) {
		if h.remaining == "" {
			undecided++
		}
	}
	t.Logf("decisions by the new master %v after the promotion; %d requests in all, %d let through undecided (on_error open) after the kill",
		resumed, len(all), undecided)

	// The counts are in the new master: start them afresh there and
	// watch the next decisions count from the limit down.
	nm := redis.NewClient(&redis.Options{Addr: replica})
	defer nm.Close()
	keys := redisKeys(t, replica, "rl:"+zone+":{k}*")
	if len(keys) == 0 {
		t.Fatalf("no key of zone %s on the new master %s", zone, replica)
	}
	if err := nm.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		h := send(c, "", "/", "")
		if want := strconv.Itoa(1000000 - i); h.code != 200 || h.remaining != want {
			t.Fatalf("after the failover, request %d: status %d, remaining %q, want 200 and %s", i, h.code, h.remaining, want)
		}
	}
	if len(redisKeys(t, replica, "rl:"+zone+":{k}*")) == 0 {
		t.Fatalf("the new decisions left no key on the new master %s", replica)
	}
}
