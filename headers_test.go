package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/zonelimit/caddy-ratelimit/algorithms"
)

// The header values of draft-ietf-httpapi-ratelimit-headers-11: one named
// policy per tier, RateLimit naming the tier it reports, t the seconds
// until more quota (not until the tier is whole: X-RateLimit-Reset).

func TestHeadersMultiTierNames(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"per_tenant","key":"k","limits":[
		{"events":2,"window":"10s"},{"events":3,"window":"1h"}]}]}`, clock)
	policy := `"per_tenant-10s";q=2;w=10, "per_tenant-1h";q=3;w=3600`

	steps := []struct {
		advance time.Duration
		code    int
		want    map[string]string
	}{
		// The 10s tier is the tightest: its oldest unit leaves at t0+10s.
		{0, 200, map[string]string{"RateLimit": `"per_tenant-10s";r=1;t=10`, "X-RateLimit-Reset": "10"}},
		{time.Second, 200, map[string]string{"RateLimit": `"per_tenant-10s";r=0;t=9`, "X-RateLimit-Reset": "10"}},
		{time.Second, 429, map[string]string{"RateLimit": `"per_tenant-10s";r=0;t=8`, "Retry-After": "8"}},
		// t0+20s: the hour tier is now the tightest, and named.
		{18 * time.Second, 200, map[string]string{"RateLimit": `"per_tenant-1h";r=0;t=3580`,
			"X-RateLimit-Limit": "3", "X-RateLimit-Reset": "3600"}},
		{time.Second, 429, map[string]string{"RateLimit": `"per_tenant-1h";r=0;t=3579`, "Retry-After": "3579"}},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		res := serve(h, newReq("192.0.2.1:1"))
		if res.code != s.code {
			t.Fatalf("step %d: code %d, want %d", i, res.code, s.code)
		}
		s.want["RateLimit-Policy"] = policy
		expectHeaders(t, res, s.want)
	}
}

// sliding_log: a unit comes back when the oldest leaves the window, long
// before the tier is whole again.
func TestHeadersSlidingLogMoreBeforeWhole(t *testing.T) {
	clock := newClock()
	h := provision(t, perIP3, clock)
	for _, step := range []time.Duration{0, 20 * time.Second, 20 * time.Second} {
		clock.Advance(step)
		serve(h, newReq("192.0.2.1:1"))
	}
	// t0+40s, three units logged at t0, t0+20s, t0+40s: one is free at
	// t0+60s, all at t0+100s.
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"Retry-After":       "20",
		"RateLimit":         `"api";r=0;t=20`,
		"X-RateLimit-Reset": "60",
	})
	clock.Advance(20 * time.Second)
	res = serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"RateLimit":         `"api";r=0;t=20`,
		"X-RateLimit-Reset": "60",
	})
}

// A sliding_window's previous window weighs less as time passes: more
// quota comes back well before the estimate is 0.
func TestHeadersSlidingWindow(t *testing.T) {
	clock := newClock() // on a 10s boundary
	h := provision(t, `{"zones":[{"name":"sw","key":"k","algorithm":"sliding_window","limits":[{"events":10,"window":"10s"}]}]}`, clock)
	for i := 0; i < 10; i++ {
		serve(h, newReq("192.0.2.1:1"))
	}
	clock.Advance(12500 * time.Millisecond)
	// The previous window weighs 10 x (1 - 2.5/10) = 7.5, rounded up to 8:
	// with this request 1 left, a 2nd once the weight is 7 (at 13s: t=1),
	// all once this request's window is out of reach (at 30s).
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"RateLimit":         `"sw";r=1;t=1`,
		"X-RateLimit-Reset": "18",
	})
}

// A token bucket refills one token at a time: t is one token's wait.
func TestHeadersBucket(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"search","key":"k","algorithm":"token_bucket","burst":5,"limits":[{"events":2,"window":"10s"}]}]}`, clock)
	policy := `"search";q=2;w=10`
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{"RateLimit-Policy": policy, "RateLimit": `"search";r=4;t=5`,
		"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "5"})
	serve(h, newReq("192.0.2.1:1"))
	res = serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{"RateLimit": `"search";r=2;t=5`, "X-RateLimit-Reset": "15"})
	// 2s later 3.6 tokens are missing after this request: the 2nd left
	// comes 0.6 tokens (3s) later, the bucket is full in 18s.
	clock.Advance(2 * time.Second)
	res = serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{"RateLimit": `"search";r=1;t=3`, "X-RateLimit-Reset": "18"})
}

// A concurrency zone counts requests in flight: qu says so, and t is at
// most a second (a slot frees when a request ends, which cannot be known).
func TestHeadersConcurrency(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"conc","key":"k","algorithm":"concurrency","limits":[{"events":2,"window":"30s"}]}]}`, newClock())
	policy := `"conc";q=2;qu="concurrent-requests";w=30`
	var inner, denied result
	outer := serve(h, newReq("192.0.2.1:1"), func(w http.ResponseWriter, r *http.Request) error {
		inner = serve(h, newReq("192.0.2.1:2"), func(w http.ResponseWriter, r *http.Request) error {
			denied = serve(h, newReq("192.0.2.1:3"))
			w.WriteHeader(http.StatusOK)
			return nil
		})
		w.WriteHeader(http.StatusOK)
		return nil
	})
	if outer.code != 200 || inner.code != 200 || denied.code != 429 {
		t.Fatalf("codes %d %d %d, want 200 200 429", outer.code, inner.code, denied.code)
	}
	expectHeaders(t, outer, map[string]string{"RateLimit-Policy": policy, "RateLimit": `"conc";r=1;t=1`})
	expectHeaders(t, inner, map[string]string{"RateLimit-Policy": policy, "RateLimit": `"conc";r=0;t=1`})
	expectHeaders(t, denied, map[string]string{"RateLimit-Policy": policy, "RateLimit": `"conc";r=0;t=1`, "Retry-After": "1"})
	// The others ended: only this request's own lease is held.
	expectHeaders(t, serve(h, newReq("192.0.2.1:4")), map[string]string{"RateLimit": `"conc";r=1;t=1`})
}

// A zone whose requests cost other than one unit counts in units, a
// concurrency zone's too (r counts units in flight then).
func TestHeadersQuotaUnits(t *testing.T) {
	for _, tc := range []struct {
		alg, cost, policy, rl string
	}{
		{"sliding_log", `"1"`, `"z";q=100;w=60`, `"z";r=99;t=60`},
		{"sliding_log", `"2"`, `"z";q=100;qu="units";w=60`, `"z";r=98;t=60`},
		{"sliding_log", `"{http.request.header.X-Cost}"`, `"z";q=100;qu="units";w=60`, `"z";r=70;t=60`},
		{"concurrency", `"1"`, `"z";q=100;qu="concurrent-requests";w=60`, `"z";r=99;t=1`},
		{"concurrency", `"2"`, `"z";q=100;qu="units";w=60`, `"z";r=98;t=1`},
	} {
		h := provision(t, `{"zones":[{"name":"z","key":"k","algorithm":"`+tc.alg+`","cost":`+tc.cost+`,"limits":[{"events":100,"window":"1m"}]}]}`, newClock())
		res := serve(h, newReq("192.0.2.1:1", header("X-Cost", "30")))
		expectHeaders(t, res, map[string]string{"RateLimit-Policy": tc.policy, "RateLimit": tc.rl})
	}
}

// w is a whole number of seconds, at least 1: a sub-second window is
// rounded up (10 per 500ms says q=10;w=1, never more than it admits).
func TestHeadersSubSecondWindow(t *testing.T) {
	out, _, err := adaptCaddyfile(t, `:8080 {
	rate_limit {
		zone fast {
			key k
			limit 10 500ms
		}
		zone tiers {
			key k
			limit 3 500ms
			limit 20 1m
		}
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	hs := findRateLimitHandlers(t, []byte(out))
	if len(hs) != 1 {
		t.Fatalf("%d rate_limit handlers", len(hs))
	}
	h := provision(t, string(hs[0]), newClock())
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"RateLimit-Policy": `"fast";q=10;w=1, "tiers-500ms";q=3;w=1, "tiers-1m";q=20;w=60`,
		// tiers-500ms has 2 left, fewer than fast's 9: it is reported.
		"RateLimit":         `"tiers-500ms";r=2;t=1`,
		"X-RateLimit-Reset": "1",
	})
}

func TestPolicyNames(t *testing.T) {
	tiers := func(ws ...time.Duration) []algorithms.Tier {
		ts := make([]algorithms.Tier, len(ws))
		for i, w := range ws {
			ts[i] = algorithms.Tier{Events: 1, Window: w}
		}
		return ts
	}
	for _, tc := range []struct {
		tiers []algorithms.Tier
		want  []string
	}{
		{tiers(time.Minute), []string{"z"}},
		{tiers(10*time.Second, time.Hour), []string{"z-10s", "z-1h"}},
		{tiers(1500*time.Millisecond, 90*time.Second, 24*time.Hour, 36*time.Hour), []string{"z-1500ms", "z-90s", "z-1d", "z-36h"}},
		{tiers(1001*time.Microsecond, 2*time.Minute), []string{"z-1001us", "z-2m"}},
		// The same window twice: the later one gets its position.
		{tiers(time.Minute, time.Minute, time.Hour), []string{"z-1m", "z-1m-2", "z-1h"}},
	} {
		got := policyNames("z", tc.tiers)
		if len(got) != len(tc.want) {
			t.Fatalf("%v: %q, want %q", tc.tiers, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%v: %q, want %q", tc.tiers, got, tc.want)
				break
			}
		}
	}
}

// A dry-run denial has no Retry-After; t is still the wait of the denial.
func TestHeadersDryRunDenial(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"dry_run":true,"zones":[{"name":"d","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, clock)
	serve(h, newReq("192.0.2.1:1"))
	clock.Advance(15 * time.Second)
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{"RateLimit": `"d";r=0;t=45`, "Retry-After": ""})
}

// A waiter rejected after waiting reports the line's latest denial as seen
// then: every wait shortened by the time passed, t included.
func TestSinceShortensMoreAfter(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	d := since(algorithms.Decision{ResetAfter: 20 * time.Second, MoreAfter: 10 * time.Second, RetryAfter: 10 * time.Second}, at, at.Add(4*time.Second))
	if d.ResetAfter != 16*time.Second || d.MoreAfter != 6*time.Second || d.RetryAfter != 6*time.Second {
		t.Fatalf("4s after the denial: %+v", d)
	}
	if d = since(d, at, at.Add(time.Minute)); d.ResetAfter != 0 || d.MoreAfter != 0 || d.RetryAfter != 0 {
		t.Fatalf("long after: %+v", d)
	}
}

// Caddy's header handler replaces values in place (hdr[name][i] = ...),
// also after rate_limit (a deferred header): every value slice a response
// gets must be its own, or an edit of one response shows in the next.
func TestHeaderValuesAreTheRequests(t *testing.T) {
	h := provision(t, `{"problem_details":true,"zones":[
		{"name":"api","key":"{http.request.remote.host}","limits":[{"events":2,"window":"1m"}]}]}`, newClock())
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(200)
		return nil
	})
	for i := range 4 {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, newReq("192.0.2.1:1"), next); err != nil {
			t.Fatal(err)
		}
		for name, vals := range w.Header() {
			for _, v := range vals {
				if v == "edited" {
					t.Fatalf("request %d: %s is %q: another response's edit", i+1, name, v)
				}
			}
		}
		if i >= 2 {
			expectProblem(t, w, 429, "api")
		}
		for _, vals := range w.Header() {
			for j := range vals {
				vals[j] = "edited"
			}
		}
	}
}

// Tiers, or zones, tied on the fewest remaining: the headers describe the
// one that refuses r+1 units longest, or t would be early (a client that
// waits t and sends r+1 would get a 429).
func TestHeadersTiesReportLongestWait(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"tiers", `{"zones":[{"name":"z","key":"k","limits":[
			{"events":3,"window":"3s"},{"events":3,"window":"12s"}]}]}`, `"z-12s";r=2;t=12`},
		{"zones", `{"zones":[{"name":"za","key":"k","limits":[{"events":3,"window":"3s"}]},
			{"name":"zb","key":"k","limits":[{"events":3,"window":"12s"}]}]}`, `"zb";r=2;t=12`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := provision(t, c.config, newClock())
			res := serve(h, newReq("192.0.2.1:1"))
			expectHeaders(t, res, map[string]string{"RateLimit": c.want, "X-RateLimit-Reset": "12"})
		})
	}
}
