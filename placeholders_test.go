package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Every request has placeholders of its own, which stay its own after
// later requests (an access log reads them once the handler has returned):
// requests from several batches, in parallel, each keep their key.
func TestPlaceholdersOfEachRequest(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"z","key":"{http.request.header.X-Key}","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	n := 3*placeholderBatch + 1
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = serve(h, newReq("192.0.2.1:1", header("X-Key", fmt.Sprint("k", i))))
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.code != http.StatusOK {
			t.Fatalf("request %d: code %d", i, res.code)
		}
		expectPlaceholders(t, res, map[string]string{
			"{http.rate_limit.key}":       fmt.Sprint("k", i),
			"{http.rate_limit.remaining}": "9",
		})
	}
}

// Two rate_limit handlers on a request without vars (a bare context): the
// inner handler still finds the outer one's placeholders, and they describe
// its decision.
func TestPlaceholdersNestedWithoutVars(t *testing.T) {
	outer := provision(t, `{"zones":[{"name":"outer","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	inner := provision(t, `{"headers":"off","zones":[{"name":"inner","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	r := newReq("192.0.2.1:1")
	if caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey) != nil {
		t.Fatal("the request has vars")
	}
	res := serve(outer, r, func(w http.ResponseWriter, r *http.Request) error {
		return inner.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusOK)
			return nil
		}))
	})
	if res.code != http.StatusOK {
		t.Fatalf("code %d", res.code)
	}
	expectPlaceholders(t, res, map[string]string{
		"{http.rate_limit.zone}":      "inner",
		"{http.rate_limit.remaining}": "0",
		"{http.rate_limit.limit}":     "1",
	})
	// The outer handler's headers are its own decision's.
	expectHeaders(t, res, map[string]string{"RateLimit": `"outer";r=9;t=60`})
}

// Handlers are counted per server: two handlers of one server look for
// each other's placeholders, and a nested one updates them; a handler
// alone in its server (another config's server, say) does not need to.
func TestPlaceholdersHandlersOfAServer(t *testing.T) {
	srv, other := new(caddyhttp.Server), new(caddyhttp.Server)
	outer := provisionIn(t, `{"zones":[{"name":"outer","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, srv)
	t.Cleanup(func() { _ = outer.Cleanup() })
	inner := provisionIn(t, `{"zones":[{"name":"inner","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, srv)
	t.Cleanup(func() { _ = inner.Cleanup() })
	alone := provisionIn(t, `{"zones":[{"name":"alone","key":"k","limits":[{"events":5,"window":"1m"}]}]}`, other)
	t.Cleanup(func() { _ = alone.Cleanup() })
	if outer.rt.siblings != inner.rt.siblings || outer.rt.siblings.n.Load() != 2 || alone.rt.siblings.n.Load() != 1 {
		t.Fatalf("handlers counted %d and %d", outer.rt.siblings.n.Load(), alone.rt.siblings.n.Load())
	}

	res := serveNested(outer, inner)
	if res.code != http.StatusOK {
		t.Fatalf("code %d", res.code)
	}
	expectPlaceholders(t, res, map[string]string{"{http.rate_limit.zone}": "inner", "{http.rate_limit.remaining}": "0"})

	res = serve(alone, newReq("192.0.2.1:1"))
	expectPlaceholders(t, res, map[string]string{
		"{http.rate_limit.zone}": "alone", "{http.rate_limit.remaining}": "4", "{http.rate_limit.limit}": "5",
	})
}

// BenchmarkServeHTTPAllowedHeadersOffInServer is
// BenchmarkServeHTTPAllowedHeadersOff with the handler provisioned in a
// server, as Caddy does, and alone there (a site with one rate_limit).
func BenchmarkServeHTTPAllowedHeadersOffInServer(b *testing.B) {
	benchServeIn(b, `{"headers":"off","zones":[{"name":"bench","key":"{http.request.remote.host}","algorithm":"gcra",
		"limits":[{"events":1000000000,"window":"1s"}]}]}`, context.WithValue(context.Background(), caddyhttp.ServerCtxKey, new(caddyhttp.Server)))
}

// An outer handler with headers off leaves the request's placeholders
// without header values; the inner handler's headers still get theirs,
// its Retry-After too.
func TestHeadersAfterAHandlerWithHeadersOff(t *testing.T) {
	outer := provision(t, `{"headers":"off","zones":[{"name":"outer","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	inner := provision(t, `{"zones":[{"name":"inner","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	res := serveNested(outer, inner)
	expectHeaders(t, res, map[string]string{"RateLimit": `"inner";r=0;t=60`, "X-RateLimit-Remaining": "0", "Retry-After": ""})
	res = serveNested(outer, inner)
	if res.code != http.StatusTooManyRequests {
		t.Fatalf("code %d", res.code)
	}
	expectHeaders(t, res, map[string]string{"RateLimit": `"inner";r=0;t=60`, "Retry-After": "60"})
	expectPlaceholders(t, res, map[string]string{"{http.rate_limit.exceeded.name}": "inner", "{http.rate_limit.retry_after}": "60"})
}

// A handler of a named route runs once per invoke of the route, so twice
// in a request that invokes it twice, though it is its server's only
// rate_limit handler: the placeholders describe its latest decision.
func TestPlaceholdersNamedRouteInvokedTwice(t *testing.T) {
	srv := &caddyhttp.Server{NamedRoutes: map[string]*caddyhttp.Route{"limited": {}}}
	h := provisionIn(t, `{"zones":[{"name":"z","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, srv)
	t.Cleanup(func() { _ = h.Cleanup() })
	res := serve(h, newReq("192.0.2.1:1"), func(w http.ResponseWriter, r *http.Request) error {
		return h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusOK)
			return nil
		}))
	})
	if res.code != http.StatusOK {
		t.Fatalf("code %d", res.code)
	}
	expectPlaceholders(t, res, map[string]string{"{http.rate_limit.remaining}": "8"})
	expectHeaders(t, res, map[string]string{"RateLimit": `"z";r=8;t=60`})
}

// BenchmarkServeHTTPAllowedHeadersOffSlidingLog is
// BenchmarkServeHTTPAllowedHeadersOffInServer with the default algorithm,
// as bench/instructions.sh's pass_headers_off site.
func BenchmarkServeHTTPAllowedHeadersOffSlidingLog(b *testing.B) {
	benchServeIn(b, `{"headers":"off","zones":[{"name":"bench","key":"{http.request.remote.host}",
		"limits":[{"events":1000000000,"window":"1s"}]}]}`, context.WithValue(context.Background(), caddyhttp.ServerCtxKey, new(caddyhttp.Server)))
}

// An admitted request with headers off allocates once in the handler: the
// function bound to its placeholders that Replacer.Map takes (their 64
// bytes come from arrays of placeholderBatch). Each request gets a
// replacer of its own, made before counting, as Caddy's server makes it.
func TestAllocationsAdmittedHeadersOff(t *testing.T) {
	h := provisionIn(t, `{"headers":"off","zones":[{"name":"z","key":"{http.request.remote.host}","limits":[{"events":1000000,"window":"1m"}]}]}`, new(caddyhttp.Server))
	t.Cleanup(func() { _ = h.Cleanup() })
	const runs = 100
	reqs := make([]*http.Request, runs+1) // AllocsPerRun runs once more to warm up
	for i := range reqs {
		reqs[i] = newReq("192.0.2.1:1234")
	}
	w := &discardWriter{h: make(http.Header)}
	i := 0
	n := testing.AllocsPerRun(runs, func() {
		if err := h.ServeHTTP(w, reqs[i], nopHandler{}); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if n > 1 {
		t.Errorf("%v allocations per admitted request, want at most 1", n)
	}
}
