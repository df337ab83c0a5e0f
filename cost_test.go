package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// takeCounter counts the Takes that reach a zone's store.
type takeCounter struct {
	store.Store
	n atomic.Int64
}

func (s *takeCounter) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	s.n.Add(1)
	return s.Store.Take(ctx, key, now, cost)
}

// A request whose cost no tier can ever admit (above the smallest tier's
// events, or the burst of a bucket) is refused without a store call, with
// the tier it exceeds, and Retry-After its window; a cost that fits is
// decided by the store. With count_rejected a denial consumes, so the
// store decides every request.
func TestCostNeverAdmittedSkipsStore(t *testing.T) {
	for _, tc := range []struct {
		name, zone string
		fits, over int64  // a cost that fits, and one that never can
		limit      string // X-RateLimit-Limit of the refusal
		retry      string
		calls      int64 // store calls for the two requests
		fitsCode   int   // the answer to the cost that fits, after the other
	}{
		{"tiers", `"limits":[{"events":100,"window":"1m"},{"events":10,"window":"1s"}]`, 10, 11, "10", "1", 1, 200},
		{"longest window of the exceeded", `"limits":[{"events":5,"window":"1h"},{"events":5,"window":"1s"}]`, 5, 6, "5", "3600", 1, 200},
		{"burst", `"algorithm":"token_bucket","burst":20,"limits":[{"events":10,"window":"1m"}]`, 20, 21, "20", "60", 1, 200},
		{"gcra events", `"algorithm":"gcra","limits":[{"events":10,"window":"1m"}]`, 10, 11, "10", "60", 1, 200},
		{"concurrency", `"algorithm":"concurrency","limits":[{"events":3,"window":"1m"}]`, 3, 4, "3", "60", 1, 200},
		{"count_rejected", `"count_rejected":true,"limits":[{"events":10,"window":"1m"}]`, 10, 11, "10", "60", 2, 429}, // the refusal consumed the tier
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := provision(t, `{"zones":[{"name":"c","key":"k","cost":"{http.request.header.X-Cost}",`+tc.zone+`}]}`, newClock())
			counter := &takeCounter{Store: h.rt.zones[0].store}
			h.rt.zones[0].store = counter

			res := serve(h, newReq("192.0.2.1:1", header("X-Cost", strconv.FormatInt(tc.over, 10))))
			if res.code != 429 || res.called {
				t.Fatalf("cost %d: code %d (next called %v), want 429", tc.over, res.code, res.called)
			}
			if got := res.hdr.Get("X-RateLimit-Limit"); got != tc.limit {
				t.Errorf("cost %d: X-RateLimit-Limit %q, want %q (the tier it exceeds)", tc.over, got, tc.limit)
			}
			if got := res.hdr.Get("Retry-After"); got != tc.retry {
				t.Errorf("cost %d: Retry-After %q, want %q", tc.over, got, tc.retry)
			}
			res = serve(h, newReq("192.0.2.1:1", header("X-Cost", strconv.FormatInt(tc.fits, 10))))
			if res.code != tc.fitsCode {
				t.Fatalf("cost %d after cost %d: code %d, want %d", tc.fits, tc.over, res.code, tc.fitsCode)
			}
			if got := counter.n.Load(); got != tc.calls {
				t.Errorf("store called %d times for the two requests, want %d", got, tc.calls)
			}
		})
	}
}
