package ratelimit

import (
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
