package ops

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

const (
	mRequests  = "caddy_http_rate_limit_requests_total"
	mDecision  = "caddy_http_rate_limit_decision_seconds"
	mStoreErrs = "caddy_http_rate_limit_store_errors_total"
	mBreaker   = "caddy_http_rate_limit_breaker_open"
	mKeys      = "caddy_http_rate_limit_keys"
	mPending   = "caddy_http_rate_limit_pending_releases"
)

// histogramCount is the sample count of a histogram series (-1 if absent).
func histogramCount(fams map[string]*dto.MetricFamily, name string, labels ...string) int64 {
	m, ok := caddytesting.Sample(fams, name, labels...)
	if !ok || m.GetHistogram() == nil {
		return -1
	}
	return int64(m.GetHistogram().GetSampleCount())
}

// expectValue fails the test unless the series has the value.
func expectValue(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	if got := caddytesting.Value(fams, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v (-1: no such series)", name, labels, got, want)
	}
}

// zoneCounts is what the metrics say of one zone: its requests allowed
// and denied, and the keys it holds.
type zoneCounts struct{ allowed, denied, keys float64 }

// TestMetricsScrape sends allowed and denied requests through two memory
// zones and scrapes the admin endpoint's /metrics: the requests by zone and
// result, the decision histogram of the memory store and the keys held are
// exact. After a reload with the same zones the endpoint still answers
// well-formed text (no duplicate registration): the zones' counts carried
// over (keys held), and the counters keep counting (Caddy makes a registry
// per config load; the same collectors are registered in each).
func TestMetricsScrape(t *testing.T) {
	cfg := func(body string) string {
		return live.Globals("") + live.Site(
			caddytesting.Zone("ops_metrics_a", caddytesting.MatchPath("/a"), caddytesting.ClientKey, "limit 2 1h")+
				caddytesting.Zone("ops_metrics_b", caddytesting.MatchPath("/b"), caddytesting.ClientKey, "algorithm token_bucket", "limit 1 1h"),
			fmt.Sprintf("respond %q", body))
	}
	live.Load(t, cfg("one"))

	// Before any request: the zones' series exist at 0.
	fams := live.Scrape(t)
	// The histogram counts the decisions of every zone since the first
	// config with rate_limit (earlier tests' too).
	decided := max(histogramCount(fams, mDecision, "store", "memory"), 0)
	expectValue(t, fams, 0, mRequests, "zone", "ops_metrics_a", "result", "allowed")
	expectValue(t, fams, 0, mKeys, "zone", "ops_metrics_a")

	// a: clients c1 x3 (2 allowed, 1 denied), c2 x1, c3 x4 (2, 2):
	// 5 allowed, 3 denied, 3 keys. b: c1 x2 (1, 1): 1 allowed, 1 denied.
	send := func(path, client string, n int) (allowed, denied int) {
		t.Helper()
		for range n {
			switch r := live.Get(t, path, "X-Client", client); r.Code {
			case 200:
				allowed++
			case 429:
				denied++
			default:
				t.Fatalf("%s: status %d", path, r.Code)
			}
		}
		return
	}
	var aAllowed, aDenied int
	for _, c := range []struct {
		client string
		n      int
	}{{"c1", 3}, {"c2", 1}, {"c3", 4}} {
		al, de := send("/a", c.client, c.n)
		aAllowed += al
		aDenied += de
	}
	bAllowed, bDenied := send("/b", "c1", 2)
	if aAllowed != 5 || aDenied != 3 || bAllowed != 1 || bDenied != 1 {
		t.Fatalf("responses: a %d/%d, b %d/%d allowed/denied, want 5/3 and 1/1", aAllowed, aDenied, bAllowed, bDenied)
	}
	// A request no zone applies to is not counted anywhere.
	caddytesting.ExpectCode(t, live.Get(t, "/c"), 200, "/c")

	// The requests by zone and result, and the keys held, of zones a and b.
	expectZones := func(fams map[string]*dto.MetricFamily, a, b zoneCounts) {
		t.Helper()
		for zone, want := range map[string]zoneCounts{"ops_metrics_a": a, "ops_metrics_b": b} {
			expectValue(t, fams, want.allowed, mRequests, "zone", zone, "result", "allowed")
			expectValue(t, fams, want.denied, mRequests, "zone", zone, "result", "denied")
			expectValue(t, fams, 0, mRequests, "zone", zone, "result", "error")
			expectValue(t, fams, want.keys, mKeys, "zone", zone)
		}
	}
	fams = live.Scrape(t)
	expectZones(fams, zoneCounts{allowed: 5, denied: 3, keys: 3}, zoneCounts{allowed: 1, denied: 1, keys: 1})
	if n := histogramCount(fams, mDecision, "store", "memory") - decided; n != 10 {
		t.Errorf("%s{store=memory} has %d samples more, want 10 (one per decision)", mDecision, n)
	}
	if m, ok := caddytesting.Sample(fams, mDecision, "store", "memory"); ok && m.GetHistogram().GetSampleSum() <= 0 {
		t.Errorf("%s{store=memory}: sum %v, want > 0", mDecision, m.GetHistogram().GetSampleSum())
	}
	expectValue(t, fams, 0, mStoreErrs, "zone", "ops_metrics_a")
	if _, ok := caddytesting.Sample(fams, mBreaker, "zone", "ops_metrics_a"); ok {
		t.Errorf("%s has a series for a memory zone", mBreaker)
	}

	// A reload with the same zones (another response body).
	live.Load(t, cfg("two"))
	live.WaitServing(t, "two", "/") // "/" is in neither zone
	if r := live.Get(t, "/a", "X-Client", "c1"); r.Code != 429 || r.Body != "" {
		t.Fatalf("c1 after the reload: %d %q, want 429 (its count carried over)", r.Code, r.Body)
	}
	if r := live.Get(t, "/a", "X-Client", "c4"); r.Code != 200 || r.Body != "two" {
		t.Fatalf("c4 after the reload: %d %q, want 200 from the new config", r.Code, r.Body)
	}
	fams = live.Scrape(t)
	expectZones(fams, zoneCounts{allowed: 6, denied: 4, keys: 4}, zoneCounts{allowed: 1, denied: 1, keys: 1})
	if n := histogramCount(fams, mDecision, "store", "memory") - decided; n != 12 {
		t.Errorf("after the reload %s{store=memory} has %d samples more, want 12", mDecision, n)
	}
	// Scraped again, still well-formed, and the keys gauge is a
	// reading, not a count.
	fams = live.Scrape(t)
	expectValue(t, fams, 4, mKeys, "zone", "ops_metrics_a")
}

// TestMetricsRedisDown: with store redis, on_error open, and Redis
// stopped, requests still pass; each failing call counts in
// store_errors_total until the breaker opens (after 5 failures, and then
// breaker_open is 1 and Redis is not called: store_errors_total stops while
// requests_total{result="error"} goes on); once Redis is back the breaker
// closes (breaker_open 0) and decisions are Redis's again.
func TestMetricsRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	const zone = "ops_metrics_redis"
	live.LoadSites(t, fmt.Sprintf(`
http://:%d {
	rate_limit {
		zone %s {
			key static
			limit 100 1h
		}
		store redis
		redis {
			address %s
			dial_timeout 200ms
		}
		on_error open
	}
	respond "ok"
}
`, live.HTTPPort, zone, srv.Addr))
	decided := max(histogramCount(live.Scrape(t), mDecision, "store", "redis"), 0) // earlier tests'

	for i := 1; i <= 2; i++ {
		r := live.Get(t, "/")
		if r.Code != 200 || caddytesting.Remaining(t, r) != 100-i {
			t.Fatalf("request %d with Redis up: %d, remaining %q", i, r.Code, r.Header.Get("X-RateLimit-Remaining"))
		}
	}
	fams := live.Scrape(t)
	expectValue(t, fams, 2, mRequests, "zone", zone, "result", "allowed")
	expectValue(t, fams, 0, mBreaker, "zone", zone)
	expectValue(t, fams, 0, mStoreErrs, "zone", zone)
	if n := histogramCount(fams, mDecision, "store", "redis") - decided; n != 2 {
		t.Errorf("%s{store=redis} has %d samples more, want 2", mDecision, n)
	}
	if _, ok := caddytesting.Sample(fams, mKeys, "zone", zone); ok {
		t.Errorf("%s has a series for a redis zone without a memory fallback", mKeys)
	}

	srv.Stop()
	sent := 0
	opened := false
	for sent < 50 && !opened {
		r := live.Get(t, "/")
		sent++
		if r.Code != 200 {
			t.Fatalf("request %d with Redis down, on_error open: status %d", sent, r.Code)
		}
		if r.Header.Get("X-RateLimit-Remaining") != "" {
			t.Fatalf("request %d with Redis down: decided (remaining %q)", sent, r.Header.Get("X-RateLimit-Remaining"))
		}
		opened = caddytesting.Value(live.Scrape(t), mBreaker, "zone", zone) == 1
	}
	if !opened {
		t.Fatalf("breaker_open still 0 after %d requests with Redis down", sent)
	}
	fams = live.Scrape(t)
	errs := caddytesting.Value(fams, mStoreErrs, "zone", zone)
	if errs != 5 || sent != 5 {
		t.Errorf("breaker opened after %d requests with %v store errors, want 5 and 5", sent, errs)
	}
	expectValue(t, fams, float64(sent), mRequests, "zone", zone, "result", "error")

	// Open: decided by on_error at once, Redis not called.
	for range 3 {
		caddytesting.ExpectCode(t, live.Get(t, "/"), 200, "Redis down, breaker open")
	}
	fams = live.Scrape(t)
	expectValue(t, fams, errs, mStoreErrs, "zone", zone)
	expectValue(t, fams, float64(sent+3), mRequests, "zone", zone, "result", "error")
	expectValue(t, fams, 2, mRequests, "zone", zone, "result", "allowed")

	// Back: the prober closes the breaker; decisions are Redis's again (a
	// fresh Redis: the count starts over).
	srv.Restart()
	if !caddytesting.WaitFor(15*time.Second, func() bool { return caddytesting.Value(live.Scrape(t), mBreaker, "zone", zone) == 0 }) {
		t.Fatalf("breaker_open still 1 15s after Redis came back")
	}
	r := live.Get(t, "/")
	if r.Code != 200 || caddytesting.Remaining(t, r) != 99 {
		t.Fatalf("with Redis back: %d, remaining %q, want 200 and 99", r.Code, r.Header.Get("X-RateLimit-Remaining"))
	}
	fams = live.Scrape(t)
	expectValue(t, fams, 3, mRequests, "zone", zone, "result", "allowed")
	expectValue(t, fams, errs, mStoreErrs, "zone", zone)
}
