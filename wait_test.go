package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// waitOnePerSecond is a zone of one key admitting one request a second,
// where the others wait up to a minute.
const waitOnePerSecond = `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"1m",
	"limits":[{"events":1,"window":"1s"}]}]}`

// newWaitOnePerSecond is a handler of waitOnePerSecond on a step clock,
// the Takes of its store counted, and the admissions of its requests.
func newWaitOnePerSecond(t *testing.T) (*testClock, *Handler, *countingStore, *admissions) {
	t.Helper()
	c := newStepClock()
	h := provision(t, waitOnePerSecond, c)
	return c, h, countTakes(h, c), newAdmissions(c)
}

// expectNoWaiters fails the test unless the first zone of h has no
// waiters left, nor lines.
func expectNoWaiters(t *testing.T, h *Handler) {
	t.Helper()
	if w, k := h.rt.zones[0].waiters.size(); w != 0 || k != 0 {
		t.Fatalf("%d waiters, %d lines left", w, k)
	}
}

// countingStore counts the Takes of a zone's store, with their instants
// and results; onTake, when set, sees each decision.
type countingStore struct {
	store.Store
	now    func() time.Time
	onTake func(ctx context.Context, d algorithms.Decision)

	mu    sync.Mutex
	takes []take
}

type take struct {
	at      time.Time
	allowed bool
}

func (s *countingStore) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	d, err := s.Store.Take(ctx, key, now, cost)
	s.mu.Lock()
	s.takes = append(s.takes, take{at: s.now(), allowed: d.Allowed})
	s.mu.Unlock()
	if s.onTake != nil {
		s.onTake(ctx, d)
	}
	return d, err
}

func (s *countingStore) count() (allowed, denied int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.takes {
		if t.allowed {
			allowed++
		} else {
			denied++
		}
	}
	return allowed, denied
}

func countTakes(h *Handler, c *testClock) *countingStore {
	z := h.rt.zones[0]
	cs := &countingStore{Store: z.store, now: c.Now}
	z.store = cs
	return cs
}

// admissions records the order and instants in which requests reach the
// next handler.
type admissions struct {
	mu    sync.Mutex
	clock *testClock
	ids   []int
	at    []time.Time
	done  map[int]result // the requests that have returned
}

func newAdmissions(c *testClock) *admissions {
	return &admissions{clock: c, done: make(map[int]result)}
}

// serve starts request id of h and lets it run until it waits or returns:
// requests served one after the other arrive in a known order.
func (a *admissions) serve(h *Handler, id int, r *http.Request) {
	defer a.clock.settle()
	a.clock.start(func() {
		res := serve(h, r, func(w http.ResponseWriter, _ *http.Request) error {
			a.mu.Lock()
			a.ids = append(a.ids, id)
			a.at = append(a.at, a.clock.Now())
			a.mu.Unlock()
			w.WriteHeader(http.StatusOK)
			return nil
		})
		a.mu.Lock()
		a.done[id] = res
		a.mu.Unlock()
	})
}

// result returns the result of request id, failing if it has not
// returned.
func (a *admissions) result(t *testing.T, id int) result {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	res, ok := a.done[id]
	if !ok {
		t.Fatalf("request %d has not returned", id)
	}
	return res
}

func (a *admissions) expectClientClosed(t *testing.T, id int) {
	t.Helper()
	res := a.result(t, id)
	var he caddyhttp.HandlerError
	if !errors.As(res.err, &he) || he.StatusCode != statusClientClosed {
		t.Fatalf("request %d: %v, want status %d", id, res.err, statusClientClosed)
	}
}

func (a *admissions) expectOrder(t *testing.T, ids ...int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if fmt.Sprint(a.ids) != fmt.Sprint(ids) {
		t.Fatalf("admitted %v, want %v", a.ids, ids)
	}
}

// onErrorDecided counts what on_error decided in zone z so far: the
// requests counted as error (open, closed) and, with local, the keys its
// fallback holds (each request of these tests that the fallback decides
// is of a key of its own).
func onErrorDecided(t *testing.T, z *zone) float64 {
	t.Helper()
	n := counterValue(t, z.m.failed)
	if l, ok := z.fallback.(interface{ Len() int }); ok {
		n += float64(l.Len())
	}
	return n
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func (w *waitLines) size() (waiters, keys int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, len(w.lines)
}

// Many waiters of one key are admitted in their order of arrival, one per
// interval, and the line is gone once empty.
func TestWaitFIFO(t *testing.T) {
	c := newStepClock()
	h := provision(t, `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"1m",
		"limits":[{"events":1,"window":"100ms"}]}]}`, c)
	t0 := c.Now()
	a := newAdmissions(c)
	const n = 200
	want := make([]int, n)
	for i := range n {
		a.serve(h, i, newReq("192.0.2.1:1"))
		want[i] = i
	}
	c.drain(t)
	a.expectOrder(t, want...)
	for i, at := range a.at {
		if d := at.Sub(t0); d != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("request %d admitted at t0+%s, want t0+%s", i, d, time.Duration(i)*100*time.Millisecond)
		}
	}
	expectNoWaiters(t, h)
}

// Only the head of a line asks the store: once per retry interval, plus
// the admissions.
func TestWaitStoreCallsPerRetryInterval(t *testing.T) {
	c, h, cs, a := newWaitOnePerSecond(t)
	t0 := c.Now()
	const n = 50
	for i := range n {
		a.serve(h, i, newReq("192.0.2.1:1"))
	}
	c.drain(t)
	allowed, denied := cs.count()
	if allowed != n {
		t.Fatalf("admitted %d of %d", allowed, n)
	}
	// Per interval [t0+i s, t0+(i+1) s): one admission, and one denial
	// telling the next head how long to wait.
	perSecond := make(map[time.Duration]int)
	for _, tk := range cs.takes {
		perSecond[tk.at.Sub(t0)/time.Second]++
	}
	for s, calls := range perSecond {
		if calls > 2 {
			t.Errorf("second %d: %d store calls for the key, want at most 2", s, calls)
		}
	}
	if elapsed := int(c.Now().Sub(t0) / time.Second); denied > elapsed+1 {
		t.Errorf("%d denials over %ds: the waiters polled", denied, elapsed)
	}
}

// Beyond max_waiters, a denied request is rejected at once, as a denial
// is, without asking the store when its key has a line.
func TestWaitMaxWaitersRejectsAtOnce(t *testing.T) {
	c := newStepClock()
	h := provision(t, `{"zones":[{"name":"w","key":"{http.request.header.K}","on_limit":"wait","max_wait":"1m","max_waiters":3,
		"limits":[{"events":1,"window":"1s"}]}]}`, c)
	cs := countTakes(h, c)
	a := newAdmissions(c)
	for i := range 4 { // 0 admitted, 1 to 3 wait
		a.serve(h, i, newReq("192.0.2.1:1", header("K", "a")))
	}
	before := len(cs.takes)
	a.serve(h, 4, newReq("192.0.2.1:1", header("K", "a")))
	res := a.result(t, 4) // returned without the clock moving
	if res.code != 429 || res.called {
		t.Fatalf("over max_waiters: code %d, called %v", res.code, res.called)
	}
	expectHeaders(t, res, map[string]string{"Retry-After": "1", "RateLimit": `"w";r=0;t=1`, "X-RateLimit-Remaining": "0"})
	if len(cs.takes) != before {
		t.Errorf("the rejection asked the store")
	}
	// The bound is the zone's: another key is admitted while it has
	// quota, and rejected at once when denied.
	for i := 5; i <= 6; i++ {
		a.serve(h, i, newReq("192.0.2.1:1", header("K", "b")))
	}
	if res := a.result(t, 5); res.code != 200 {
		t.Fatalf("other key: %d", res.code)
	}
	res = a.result(t, 6)
	if res.code != 429 || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("other key over max_waiters: code %d, Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	if got := counterValue(t, h.rt.zones[0].m.denied); got != 2 {
		t.Errorf("denied counted %v, want 2", got)
	}
	c.drain(t)
	a.expectOrder(t, 0, 5, 1, 2, 3)
	expectNoWaiters(t, h)
}

// max_waiters bounds a zone's waiters across a reload: the old config's
// requests still waiting count against the new config's bound, and their
// places come back as they leave.
func TestWaitMaxWaitersAcrossReload(t *testing.T) {
	c := newStepClock()
	const config = `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"1m","max_waiters":2,
		"limits":[{"events":1,"window":"1s"}]}]}`
	scope := "reload " + strconv.FormatInt(poolScopes.Add(1), 10)
	load := func() *Handler { // a config load, in the one pool scope
		h := new(Handler)
		if err := json.Unmarshal([]byte(config), h); err != nil {
			t.Fatal(err)
		}
		if err := h.provision(testContext(t), provisionOptions{now: c.Now, sleep: c.Sleep, poolScope: scope}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Cleanup() })
		return h
	}
	old := load()
	a := newAdmissions(c)
	for i := range 3 { // 0 admitted, 1 and 2 wait: the zone holds 2
		a.serve(old, i, newReq("192.0.2.1:1"))
	}
	reloaded := load()
	a.serve(reloaded, 3, newReq("192.0.2.1:1"))
	if res := a.result(t, 3); res.code != 429 || res.called {
		t.Fatalf("the new config's request while the old one's 2 wait: code %d, called %v; want rejected at once", res.code, res.called)
	}
	c.drain(t)
	a.expectOrder(t, 0, 1, 2)
	expectNoWaiters(t, old)
	a.serve(reloaded, 4, newReq("192.0.2.1:1"))
	c.drain(t)
	if res := a.result(t, 4); res.code != 200 {
		t.Fatalf("once the old config's waiters left: %d", res.code)
	}
}

// A waiter whose client goes away leaves the line at once; when it was the
// head, the next waits out the rest of the retry interval without asking
// the store, and gets in when the one who left would have.
func TestWaitClientGone(t *testing.T) {
	c, h, cs, a := newWaitOnePerSecond(t)
	t0 := c.Now()
	cancels := make([]context.CancelFunc, 5)
	for i := range 5 { // 0 admitted, 1 (head) to 4 wait
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		a.serve(h, i, newReq("192.0.2.1:1").WithContext(ctx))
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	takes := len(cs.takes)
	for _, gone := range []int{2, 1} { // one in the middle, then the head
		cancels[gone]()
		c.settle()
		a.expectClientClosed(t, gone)
	}
	if len(cs.takes) != takes {
		t.Fatalf("the new head asked the store before the retry interval ended")
	}
	c.drain(t)
	a.expectOrder(t, 0, 3, 4)
	if a.at[1].Sub(t0) != time.Second || a.at[2].Sub(t0) != 2*time.Second {
		t.Fatalf("admitted at %v, %v after t0, want 1s, 2s", a.at[1].Sub(t0), a.at[2].Sub(t0))
	}
}

type goneKey struct{}

// A head whose client goes away as the store admits it gives the admission
// back: the next in line gets it at the same instant.
func TestWaitClientGoneAtAdmission(t *testing.T) {
	c, h, cs, a := newWaitOnePerSecond(t)
	cs.onTake = func(ctx context.Context, d algorithms.Decision) {
		if cancel, ok := ctx.Value(goneKey{}).(context.CancelFunc); ok && d.Allowed {
			cancel()
		}
	}
	t0 := c.Now()
	a.serve(h, 0, newReq("192.0.2.1:1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.serve(h, 1, newReq("192.0.2.1:1").WithContext(context.WithValue(ctx, goneKey{}, cancel)))
	a.serve(h, 2, newReq("192.0.2.1:1"))
	c.drain(t)
	a.expectOrder(t, 0, 2)
	if d := a.at[1].Sub(t0); d != time.Second {
		t.Fatalf("next in line admitted at t0+%s, want t0+1s (the admission given back)", d)
	}
	a.expectClientClosed(t, 1)
}

// concurrency zones wait in line too: the head polls for a slot, the
// others sleep, and they get slots in order.
func TestWaitConcurrencyInLine(t *testing.T) {
	c := newStepClock()
	h := provision(t, `{"zones":[{"name":"c","algorithm":"concurrency","key":"k","on_limit":"wait","max_wait":"10s",
		"limits":[{"events":1,"window":"1m"}]}]}`, c)
	cs := countTakes(h, c)
	// The slot, held outside the clock's requests until released.
	release, held := make(chan struct{}), make(chan struct{})
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		serve(h, newReq("192.0.2.1:1"), func(w http.ResponseWriter, _ *http.Request) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	a := newAdmissions(c)
	for i := 1; i <= 3; i++ {
		a.serve(h, i, newReq("192.0.2.1:1"))
	}
	for range 4 { // the head polls
		c.next()
		c.settle()
	}
	if _, denied := cs.count(); denied != 5 {
		t.Fatalf("%d denials: want the head's first and its 4 polls only", denied)
	}
	close(release)
	<-holderDone
	c.drain(t)
	a.expectOrder(t, 1, 2, 3)
}

// dry_run never waits: the denied request passes at once.
func TestWaitDryRunNeverWaits(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"dry_run":true,"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"5s",
		"limits":[{"events":1,"window":"1s"}]}]}`, clock)
	serve(h, newReq("192.0.2.1:1"))
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
		t.Fatalf("dry run: code %d", res.code)
	}
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("dry run slept %v", s)
	}
}

// max_wait is at most maxMaxWait, in JSON and in the Caddyfile (with the
// line); max_waiters is positive and only with on_limit wait.
func TestWaitOptionBounds(t *testing.T) {
	zone := func(extra string) string {
		return `{"zones":[{"name":"w","key":"k","limits":[{"events":1,"window":"1s"}]` + extra + `}]}`
	}
	for _, tt := range []struct{ config, err string }{
		{zone(`,"on_limit":"wait","max_wait":"1m"`), ""},
		{zone(`,"on_limit":"wait","max_wait":"1m1s"`), "max_wait must be at most 1m0s, got 1m1s"},
		{zone(`,"on_limit":"wait","max_wait":"1s","max_waiters":5`), ""},
		{zone(`,"on_limit":"wait","max_wait":"1s","max_waiters":-1`), "max_waiters must be positive, got -1"},
		{zone(`,"max_waiters":5`), "max_waiters applies only with on_limit wait"},
	} {
		h := new(Handler)
		if err := json.Unmarshal([]byte(tt.config), h); err != nil {
			t.Fatal(err)
		}
		err := h.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: error %v, want %q", tt.config, err, tt.err)
		}
	}

	site := func(lines string) string {
		return ":8080 {\n\trate_limit {\n\t\tzone z {\n\t\t\tkey k\n\t\t\tlimit 1 1s\n" + lines + "\t\t}\n\t}\n\trespond \"ok\"\n}\n"
	}
	for _, tt := range []struct {
		caddyfile string
		want      []string
	}{
		{site("\t\t\ton_limit wait 2m\n"), []string{"Caddyfile:6", "max_wait must be at most 1m0s, got 2m0s"}},
		{site("\t\t\tmax_waiters 10\n\t\t\ton_limit wait 70s\n"), []string{"Caddyfile:7", "max_wait must be at most 1m0s"}},
		{site("\t\t\tmax_waiters 10\n"), []string{"Caddyfile:6", "max_waiters applies only with on_limit wait"}},
		{site("\t\t\ton_limit wait 1s\n\t\t\tmax_waiters 0\n"), []string{"Caddyfile:7", "max_waiters must be positive, got 0"}},
		{site("\t\t\ton_limit wait 1s\n\t\t\tmax_waiters many\n"), []string{"Caddyfile:7", `max_waiters must be a positive integer, got "many"`}},
	} {
		out, _, err := adaptCaddyfile(t, tt.caddyfile)
		if err == nil {
			t.Errorf("adapt succeeded, want an error\n%s\n%s", tt.caddyfile, out)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
	}
}

// With store redis, the waiters of a key call Redis as one waiter would:
// the head once per retry interval, plus the admissions (counted by Redis
// itself, INFO commandstats).
func TestWaitRedisCallsPerKey(t *testing.T) {
	srv := redistest.Start(t)
	h := provision(t, fmt.Sprintf(`{"store":"redis","redis":{"addresses":[%q]},
		"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"1m","limits":[{"events":1,"window":"100ms"}]}]}`, srv.Addr), nil)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	serve(h, newReq("192.0.2.1:1")) // loads the script
	if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}

	const n = 20
	codes := make(chan int, n)
	for i := range n {
		go func() { codes <- serve(h, newReq("192.0.2.1:1")).code }()
		// One after the other, so that only the first asks before
		// joining the line (a request that finds no line asks Redis).
		storetest.WaitFor(t, "the request to wait in line", func() bool {
			w, _ := h.rt.zones[0].waiters.size()
			return w == i+1 || len(codes) > 0
		})
	}
	for range n {
		if code := <-codes; code != 200 {
			t.Fatalf("code %d", code)
		}
	}
	calls := redisCalls(t, rc)
	t.Logf("%d waiters: %d EVALSHA/EVAL", n, calls)
	// n admissions and, before each, the denial telling the head how long
	// to wait; a few more when Redis's clock and ours disagree.
	if calls > 3*n {
		t.Fatalf("%d Redis calls for %d waiters, want at most %d: the waiters polled", calls, n, 3*n)
	}
}

// redisCalls is the number of script calls Redis has run (INFO
// commandstats).
func redisCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.Atoi(v)
				calls += n
			}
		}
	}
	return calls
}

// A shaped request (leaky_bucket with on_limit wait) is held for the water
// ahead of it only up to max_wait: one the bucket would hold longer is
// rejected at once, with Retry-After when the hold would fit, and its unit
// given back.
func TestShapingHoldsAtMostMaxWait(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"k","on_limit":"wait","max_wait":"2s",
		"limits":[{"events":1,"window":"1m"}],"burst":50}]}`, clock)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("first: %d", res.code)
	}
	// The bucket leaks one unit a minute: the second would be held 60s.
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called {
		t.Fatalf("held 60s with max_wait 2s: code %d, called %v; slept %v", res.code, res.called, clock.Slept())
	}
	expectHeaders(t, res, map[string]string{"Retry-After": "58", "RateLimit": `"l";r=0;t=58`})
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("slept %v", s)
	}
	// 58s later the water ahead is 2s: held that long, since the rejected
	// request's unit was given back.
	clock.Advance(58 * time.Second)
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("after Retry-After: %d", res.code)
	}
	if s := clock.Slept(); len(s) != 1 || s[0] != 2*time.Second {
		t.Fatalf("slept %v, want [2s]", s)
	}
	expectNoWaiters(t, h)
}

// A request that waited in line and is then admitted with a shaping
// delay is held only for what is left of max_wait: its whole hold, line
// and delay together, is at most max_wait.
func TestShapingAfterLineWithinMaxWait(t *testing.T) {
	c := newStepClock()
	h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"k","on_limit":"wait",
		"max_wait":"150ms","limits":[{"events":10,"window":"1s"}],"burst":2}]}`, c)
	t0 := c.Now()
	a := newAdmissions(c)
	a.serve(h, 0, newReq("192.0.2.1:1")) // an empty bucket: not held
	a.serve(h, 1, newReq("192.0.2.1:1")) // held 100ms, behind 0's water
	a.serve(h, 2, newReq("192.0.2.1:1")) // the bucket is full: waits in line
	c.drain(t)
	a.expectOrder(t, 0, 1)
	if res := a.result(t, 2); res.code != 429 || res.called {
		t.Fatalf("request 2, 100ms in line, then 100ms of shaping with max_wait 150ms: code %d, called %v", res.code, res.called)
	} else {
		expectHeaders(t, res, map[string]string{"Retry-After": "1"})
	}
	if held := c.Now().Sub(t0); held > 150*time.Millisecond {
		t.Fatalf("the requests were held until %v, beyond max_wait", held)
	}
	expectNoWaiters(t, h)
}

// Shaped requests held for their delay take places among the zone's
// max_waiters, over all keys: beyond it a request is rejected at once; a
// place comes back when its request leaves, also when its client goes
// away.
func TestShapingHoldsWithinMaxWaiters(t *testing.T) {
	c := newStepClock()
	h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"{http.request.header.K}","on_limit":"wait",
		"max_wait":"10s","max_waiters":2,"limits":[{"events":10,"window":"1s"}],"burst":10}]}`, c)
	a := newAdmissions(c)
	a.serve(h, 0, newReq("192.0.2.1:1", header("K", "a"))) // no water ahead: not held
	r1 := newReq("192.0.2.1:1", header("K", "a"))
	ctx, cancel := context.WithCancel(r1.Context()) // the request's, with its replacer
	defer cancel()
	a.serve(h, 1, r1.WithContext(ctx))
	a.serve(h, 2, newReq("192.0.2.1:1", header("K", "b")))
	a.serve(h, 3, newReq("192.0.2.1:1", header("K", "b")))
	a.serve(h, 4, newReq("192.0.2.1:1", header("K", "b"))) // held 200ms: the third hold
	res := a.result(t, 4)
	if res.code != 429 || res.called {
		t.Fatalf("third hold with max_waiters 2: code %d, called %v", res.code, res.called)
	}
	cancel() // request 1 leaves while held
	c.settle()
	a.expectClientClosed(t, 1)
	if w, _ := h.rt.zones[0].waiters.size(); w != 1 {
		t.Fatalf("%d places held after a client left, want 1", w)
	}
	a.serve(h, 5, newReq("192.0.2.1:1", header("K", "b"))) // held 200ms, as 4 would have been
	c.drain(t)
	a.expectOrder(t, 0, 2, 3, 5)
	expectNoWaiters(t, h)
}

// A shaped request that cannot leave within max_wait is rejected at once
// (not after waiting), with Retry-After when a retry could pass and t
// equal to it: one the bucket could not let out in time however long it
// waited for room, and one behind waiters in line whose units the bucket
// could not let out first in time. The others are admitted in order.
func TestShapingTooLateRejectedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, limits, maxWait string
		admitted, rejected    int
		retry                 string
	}{
		// A unit leaks every 2s; a full bucket (3) drains in 6s > 5s: a
		// retry 1s later waits 1s for room, then is held 4s.
		{"bucket", `{"events":3,"window":"6s"}`, "5s", 3, 2, "1"},
		// A unit leaks every second, the bucket holds 2: the third waits
		// 1s for room and is held until 2s, the fourth leaves at 3s; the
		// next, behind them, at 4s > 3s.
		{"line", `{"events":2,"window":"2s"}`, "3s", 4, 2, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newStepClock()
			h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"k","on_limit":"wait",
				"max_wait":"`+tc.maxWait+`","limits":[`+tc.limits+`]}]}`, c)
			a := newAdmissions(c)
			order := make([]int, tc.admitted)
			for id := range tc.admitted {
				a.serve(h, id, newReq("192.0.2.1:1"))
				order[id] = id
			}
			for id := tc.admitted; id < tc.admitted+tc.rejected; id++ {
				a.serve(h, id, newReq("192.0.2.1:1"))
				res := a.result(t, id) // returned before the clock moved
				if res.code != 429 || res.called {
					t.Fatalf("request %d: code %d, called %v", id, res.code, res.called)
				}
				expectHeaders(t, res, map[string]string{"Retry-After": tc.retry, "RateLimit": `"l";r=0;t=` + tc.retry})
			}
			c.drain(t)
			a.expectOrder(t, order...)
			expectNoWaiters(t, h)
		})
	}
}
