package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

func testContext(t *testing.T) caddy.Context {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return ctx
}

// provision provisions the handler given as JSON, with clock (if not nil)
// as its clock, and cleans it up at the end of the test.
func provision(t *testing.T, config string, clock *testClock) *Handler {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(config), h); err != nil {
		t.Fatalf("config: %v", err)
	}
	if err := provisionOn(testContext(t), h, clock); err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return h
}

type reqOpt func(*http.Request)

func header(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }
func path(p string) reqOpt      { return func(r *http.Request) { r.URL.Path = p } }

func newReq(remote string, opts ...reqOpt) *http.Request {
	r := httptest.NewRequest("GET", "http://example.com/", nil)
	r.RemoteAddr = remote
	for _, o := range opts {
		o(r)
	}
	caddyhttp.NewTestReplacer(r)
	return r
}

type result struct {
	code   int
	hdr    http.Header
	err    error
	called bool
	repl   *caddy.Replacer
}

// serve runs the request through h with a next handler that answers 200
// (or runs fn when given).
func serve(h *Handler, r *http.Request, fn ...func(http.ResponseWriter, *http.Request) error) result {
	w := httptest.NewRecorder()
	var res result
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		res.called = true
		if len(fn) > 0 {
			return fn[0](w, r)
		}
		w.WriteHeader(http.StatusOK)
		return nil
	})
	res.err = h.ServeHTTP(w, r, next)
	res.code = w.Code
	res.hdr = w.Result().Header
	res.repl, _ = r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	return res
}

// serveHeld starts a request through h whose next handler, once reached,
// answers 200 only when release is called. It returns once next is
// reached; release returns the request's result.
func serveHeld(h *Handler, r *http.Request) (release func() result) {
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan result)
	go func() {
		done <- serve(h, r, func(w http.ResponseWriter, _ *http.Request) error {
			close(inside)
			<-leave
			w.WriteHeader(http.StatusOK)
			return nil
		})
	}()
	<-inside
	return func() result {
		close(leave)
		return <-done
	}
}

// expectPlaceholders fails the test unless the placeholders of the request
// of res have the values of want ("-" when unknown).
func expectPlaceholders(t *testing.T, res result, want map[string]string) {
	t.Helper()
	for ph, w := range want {
		if got := res.repl.ReplaceAll(ph, "-"); got != w {
			t.Errorf("%s = %q, want %q", ph, got, w)
		}
	}
}

func expectHeaders(t *testing.T, res result, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := res.hdr.Values(k)
		if v == "" {
			if len(got) != 0 {
				t.Errorf("header %s = %q, want none", k, got)
			}
			continue
		}
		if len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
}

const perIP3 = `{"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":3,"window":"1m"}]}]}`

func TestAllowThenReject(t *testing.T) {
	clock := newClock()
	h := provision(t, perIP3, clock)

	for i := 0; i < 3; i++ {
		res := serve(h, newReq("192.0.2.1:1000"))
		if res.err != nil || res.code != 200 || !res.called {
			t.Fatalf("request %d: code %d err %v called %v", i+1, res.code, res.err, res.called)
		}
		expectHeaders(t, res, map[string]string{
			"RateLimit-Policy":      `"api";q=3;w=60`,
			"RateLimit":             `"api";r=` + strconv.Itoa(2-i) + `;t=60`,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": strconv.Itoa(2 - i),
			"X-RateLimit-Reset":     "60",
			"Retry-After":           "",
		})
	}

	clock.Advance(10*time.Second + time.Millisecond)
	res := serve(h, newReq("192.0.2.1:1001"))
	if res.err != nil || res.code != http.StatusTooManyRequests || res.called {
		t.Fatalf("4th request: code %d err %v called %v", res.code, res.err, res.called)
	}
	// The oldest unit leaves the window 49.999s from now: round up to 50.
	expectHeaders(t, res, map[string]string{
		"Retry-After":           "50",
		"RateLimit-Policy":      `"api";q=3;w=60`,
		"RateLimit":             `"api";r=0;t=50`,
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "50",
	})
	expectPlaceholders(t, res, map[string]string{
		"{http.rate_limit.zone}":          "api",
		"{http.rate_limit.key}":           "192.0.2.1",
		"{http.rate_limit.remaining}":     "0",
		"{http.rate_limit.limit}":         "3",
		"{http.rate_limit.retry_after}":   "50",
		"{http.rate_limit.exceeded.name}": "api",
	})

	// Another client is not affected.
	if res := serve(h, newReq("192.0.2.2:1000")); res.code != 200 || !res.called {
		t.Fatalf("other client: code %d", res.code)
	}

	// Once the window has passed, the first client is admitted again.
	clock.Advance(50 * time.Second)
	if res := serve(h, newReq("192.0.2.1:1000")); res.code != 200 || !res.called {
		t.Fatalf("after the window: code %d", res.code)
	}
}

func TestAllowedPlaceholders(t *testing.T) {
	h := provision(t, perIP3, newClock())
	res := serve(h, newReq("192.0.2.1:1000"))
	expectPlaceholders(t, res, map[string]string{
		"{http.rate_limit.zone}":        "api",
		"{http.rate_limit.key}":         "192.0.2.1",
		"{http.rate_limit.remaining}":   "2",
		"{http.rate_limit.limit}":       "3",
		"{http.rate_limit.retry_after}": "0",
	})
}

func TestHeaderModes(t *testing.T) {
	for _, tc := range []struct {
		mode           string
		ietf, legacy   bool
		statusOverride int
	}{
		{"", true, true, 0},
		{"both", true, true, 0},
		{"ietf", true, false, 0},
		{"legacy", false, true, 0},
		{"off", false, false, 503},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg := `{"headers":"` + tc.mode + `","zones":[{"name":"z","key":"k","limits":[{"events":1,"window":"10s"}]}]`
			if tc.statusOverride != 0 {
				cfg += `,"status":` + strconv.Itoa(tc.statusOverride)
			}
			cfg += `}`
			h := provision(t, cfg, newClock())
			serve(h, newReq("192.0.2.1:1"))
			res := serve(h, newReq("192.0.2.1:1"))
			wantCode := 429
			if tc.statusOverride != 0 {
				wantCode = tc.statusOverride
			}
			if res.code != wantCode {
				t.Fatalf("code %d, want %d", res.code, wantCode)
			}
			if got := res.hdr.Get("Retry-After"); got != "10" {
				t.Errorf("Retry-After %q, want 10 whatever the mode", got)
			}
			has := func(k string) bool { return len(res.hdr.Values(k)) > 0 }
			if has("RateLimit") != tc.ietf || has("RateLimit-Policy") != tc.ietf {
				t.Errorf("ietf headers present = %v, want %v", has("RateLimit"), tc.ietf)
			}
			for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if has(k) != tc.legacy {
					t.Errorf("%s present = %v, want %v", k, has(k), tc.legacy)
				}
			}
		})
	}
}

func TestTiersReportTightest(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"t","key":"k","limits":[
		{"events":2,"window":"1s"},{"events":5,"window":"1m"}]}]}`, clock)

	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"RateLimit-Policy":      `"t-1s";q=2;w=1, "t-1m";q=5;w=60`,
		"RateLimit":             `"t-1s";r=1;t=1`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
	})
	serve(h, newReq("192.0.2.1:1"))
	res = serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("3rd in a second: code %d Retry-After %q", res.code, res.hdr.Get("Retry-After"))
	}
	// Keep to the per-second tier: the per-minute one refuses the 6th.
	for i := 0; i < 3; i++ {
		clock.Advance(time.Second)
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: code %d", i+3, res.code)
		}
	}
	clock.Advance(time.Second)
	res = serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 {
		t.Fatalf("6th in a minute: code %d", res.code)
	}
	expectHeaders(t, res, map[string]string{
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"Retry-After":           "56", // the first unit (t0) leaves at t0+60s; now is t0+4s
	})
}

// A request denied by one zone consumes nothing in the zones before it.
func TestDenialUndoesEarlierZones(t *testing.T) {
	h := provision(t, `{"zones":[
		{"name":"site","key":"all","limits":[{"events":2,"window":"1m"}]},
		{"name":"ip","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]}]}`, newClock())

	steps := []struct {
		remote string
		code   int
		zone   string
	}{
		{"192.0.2.1:1", 200, "ip"},   // site 1/2, ip1 1/1
		{"192.0.2.1:1", 429, "ip"},   // ip1 refuses: site's unit is given back
		{"192.0.2.1:1", 429, "ip"},   // and again
		{"192.0.2.2:1", 200, "site"}, // site 2/2 (would be refused without the undo)
		{"192.0.2.3:1", 429, "site"}, // site is full
	}
	for i, s := range steps {
		res := serve(h, newReq(s.remote))
		if res.code != s.code {
			t.Fatalf("step %d (%s): code %d, want %d", i+1, s.remote, res.code, s.code)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.zone}", ""); got != s.zone {
			t.Errorf("step %d: reported zone %q, want %q", i+1, got, s.zone)
		}
	}
	// After a denial by the second zone, the policy names the zones that
	// decided.
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{"RateLimit-Policy": `"site";q=2;w=60`})
}

func TestMatchers(t *testing.T) {
	h := provision(t, `{"zones":[
		{"name":"api","match":[{"path":["/api/*"]}],"key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]},
		{"name":"login","match":[{"path":["/login"]}],"key":"{http.request.remote.host}","limits":[{"events":2,"window":"1m"}]}]}`, newClock())

	if res := serve(h, newReq("192.0.2.1:1", path("/static/a.css"))); res.code != 200 || len(res.hdr) != 0 {
		t.Fatalf("unmatched: code %d headers %v", res.code, res.hdr)
	}
	if res := serve(h, newReq("192.0.2.1:1", path("/api/x"))); res.code != 200 {
		t.Fatalf("api 1: %d", res.code)
	} else {
		expectHeaders(t, res, map[string]string{"RateLimit-Policy": `"api";q=1;w=60`})
	}
	if res := serve(h, newReq("192.0.2.1:1", path("/api/y"))); res.code != 429 {
		t.Fatalf("api 2: %d", res.code)
	}
	for i := 0; i < 2; i++ {
		if res := serve(h, newReq("192.0.2.1:1", path("/login"))); res.code != 200 {
			t.Fatalf("login %d: %d", i+1, res.code)
		}
	}
	if res := serve(h, newReq("192.0.2.1:1", path("/login"))); res.code != 429 {
		t.Fatalf("login 3: %d", res.code)
	}
	if res := serve(h, newReq("192.0.2.1:1", path("/static/b.css"))); res.code != 200 {
		t.Fatalf("unmatched after limits: %d", res.code)
	}
}

func TestEmptyKey(t *testing.T) {
	cfg := func(mode string) string {
		return `{"zones":[{"name":"org","key":"{http.request.header.X-Org}","empty_key":"` + mode +
			`","limits":[{"events":1,"window":"30s"}]}]}`
	}
	t.Run("allow", func(t *testing.T) {
		h := provision(t, cfg("allow"), newClock())
		for i := 0; i < 3; i++ {
			if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || len(res.hdr) != 0 {
				t.Fatalf("request %d: code %d headers %v", i, res.code, res.hdr)
			}
		}
		serve(h, newReq("192.0.2.1:1", header("X-Org", "a")))
		if res := serve(h, newReq("192.0.2.1:1", header("X-Org", "a"))); res.code != 429 {
			t.Fatalf("keyed request not limited: %d", res.code)
		}
	})
	t.Run("deny", func(t *testing.T) {
		h := provision(t, cfg("deny"), newClock())
		res := serve(h, newReq("192.0.2.1:1"))
		if res.code != 429 || res.called {
			t.Fatalf("code %d called %v", res.code, res.called)
		}
		expectHeaders(t, res, map[string]string{"Retry-After": "30", "X-RateLimit-Remaining": "0"})
		if res := serve(h, newReq("192.0.2.1:1", header("X-Org", "a"))); res.code != 200 {
			t.Fatalf("keyed: %d", res.code)
		}
	})
	t.Run("global", func(t *testing.T) {
		for _, mode := range []string{"global", ""} {
			h := provision(t, cfg(mode), newClock())
			if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
				t.Fatalf("first: %d", res.code)
			}
			// Keyless requests from anyone share one key.
			if res := serve(h, newReq("192.0.2.2:1")); res.code != 429 {
				t.Fatalf("second keyless: %d", res.code)
			}
			if res := serve(h, newReq("192.0.2.2:1", header("X-Org", "b"))); res.code != 200 {
				t.Fatalf("keyed: %d", res.code)
			}
		}
	})
}

func TestCostPlaceholder(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"c","key":"k","cost":"{http.request.header.X-Cost}","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	for i, tc := range []struct {
		cost      string
		remaining string
		code      int
	}{
		{"4", "6", 200},
		{"abc", "5", 200}, // not a number: 1
		{"0", "4", 200},   // not positive: 1
		{"-3", "3", 200},  // not positive: 1
		{"", "2", 200},    // absent: 1
		{" 2 ", "0", 200},
		{"1", "0", 429},
		{"99999999999999999999", "0", 429}, // beyond int64: the largest, over the limit
	} {
		var opts []reqOpt
		if tc.cost != "" {
			opts = append(opts, header("X-Cost", tc.cost))
		}
		res := serve(h, newReq("192.0.2.1:1", opts...))
		if res.code != tc.code || res.hdr.Get("X-RateLimit-Remaining") != tc.remaining {
			t.Fatalf("step %d (cost %q): code %d remaining %q, want %d %q", i+1, tc.cost, res.code,
				res.hdr.Get("X-RateLimit-Remaining"), tc.code, tc.remaining)
		}
	}
}

func TestStaticCost(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"c","key":"k","cost":"3","limits":[{"events":7,"window":"1m"}]}]}`, newClock())
	for _, want := range []int{200, 200, 429} {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != want {
			t.Fatalf("code %d, want %d", res.code, want)
		}
	}
}

func TestIPv6PrefixGrouping(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"v6","key":"{http.request.remote.host}","ipv6_prefix":64,"ipv4_prefix":24,
		"limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	if res := serve(h, newReq("[2001:db8:1:2::1]:5000")); res.code != 200 {
		t.Fatalf("first: %d", res.code)
	} else if got := res.repl.ReplaceAll("{http.rate_limit.key}", ""); got != "2001:db8:1:2::/64" {
		t.Errorf("key %q", got)
	}
	if res := serve(h, newReq("[2001:db8:1:2:ffff::9]:5000")); res.code != 429 {
		t.Fatalf("same /64: %d", res.code)
	}
	if res := serve(h, newReq("[2001:db8:1:3::1]:5000")); res.code != 200 {
		t.Fatalf("other /64: %d", res.code)
	}
	serve(h, newReq("198.51.100.7:1"))
	if res := serve(h, newReq("198.51.100.200:1")); res.code != 429 {
		t.Fatalf("same /24: %d", res.code)
	}
}

func TestDryRun(t *testing.T) {
	h := provision(t, `{"dry_run":true,"zones":[{"name":"d","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	serve(h, newReq("192.0.2.1:1"))
	for i := 0; i < 3; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		if res.code != 200 || !res.called || res.err != nil {
			t.Fatalf("dry run rejected: code %d err %v", res.code, res.err)
		}
		expectHeaders(t, res, map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": ""})
	}
}

func TestErrorRoutes(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"e","key":"k","limits":[{"events":1,"window":"2s"}]}]}`, newClock())
	h.rt.errorRoutes = errorRoutesYes
	serve(h, newReq("192.0.2.1:1"))
	res := serve(h, newReq("192.0.2.1:1"))
	var he caddyhttp.HandlerError
	if !errors.As(res.err, &he) || he.StatusCode != 429 {
		t.Fatalf("want a 429 HandlerError, got %v", res.err)
	}
	// An ID for {http.error.id}, as caddyhttp.Error gives, but no stack
	// trace (costly, and a denial is no failure to debug), and no Err (see
	// TestRejectionErrorMessage).
	if len(he.ID) != 9 || he.Trace != "" || he.Err != nil {
		t.Errorf("error %q: ID %q, trace %q", he.Error(), he.ID, he.Trace)
	}
	if he2 := serve(h, newReq("192.0.2.1:1")).err.(caddyhttp.HandlerError); he2.ID == he.ID {
		t.Errorf("two rejections share the ID %q", he.ID)
	}
	if res.called {
		t.Fatal("next called")
	}
	if res.hdr.Get("Retry-After") != "2" || res.hdr.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("headers not set before the error: %v", res.hdr)
	}

	// Through a server whose handle_errors has routes, found in the
	// request's context.
	h.rt.errorRoutes = errorRoutesUnknown
	srv := &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}}
	r := newReq("192.0.2.1:1")
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.ServerCtxKey, srv))
	if res := serve(h, r); !errors.As(res.err, &he) {
		t.Fatalf("with error routes in the server: %v", res.err)
	}
	srv.Errors = nil
	if res := serve(h, r); res.err != nil || res.code != 429 {
		t.Fatalf("without error routes: code %d err %v", res.code, res.err)
	}

	// Inside the error routes themselves the handler writes the status.
	h.rt.errorRoutes = errorRoutesYes
	r = newReq("192.0.2.1:1")
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.ErrorCtxKey, errors.New("earlier")))
	if res := serve(h, r); res.err != nil || res.code != 429 {
		t.Fatalf("within error routes: code %d err %v", res.code, res.err)
	}
	// The same when the server's routes decide.
	h.rt.errorRoutes = errorRoutesUnknown
	srv.Errors = &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.ServerCtxKey, srv))
	if res := serve(h, r); res.err != nil || res.code != 429 {
		t.Fatalf("within the server's error routes: code %d err %v", res.code, res.err)
	}
}

func TestJitter(t *testing.T) {
	h := provision(t, `{"jitter":0.5,"zones":[{"name":"j","key":"k","limits":[{"events":1,"window":"10s"}]}]}`, newClock())
	serve(h, newReq("192.0.2.1:1"))
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		n, err := strconv.Atoi(res.hdr.Get("Retry-After"))
		if err != nil || n < 10 || n > 15 {
			t.Fatalf("Retry-After %q out of [10, 15]", res.hdr.Get("Retry-After"))
		}
		seen[res.hdr.Get("Retry-After")] = true
	}
	if len(seen) < 2 {
		t.Errorf("no jitter: %v", seen)
	}
}

func TestConcurrencyRelease(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"c","algorithm":"concurrency","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())

	// A request in flight holds the only lease.
	release := serveHeld(h, newReq("192.0.2.1:1"))
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 || res.called {
		t.Fatalf("second in flight: code %d", res.code)
	}
	if res := release(); res.err != nil {
		t.Fatal(res.err)
	}

	// Finished: released. Failing: released.
	if res := serve(h, newReq("192.0.2.1:1"), func(http.ResponseWriter, *http.Request) error {
		return caddyhttp.Error(502, errors.New("upstream down"))
	}); res.err == nil {
		t.Fatal("next's error lost")
	}
	// Panicking: released.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		serve(h, newReq("192.0.2.1:1"), func(http.ResponseWriter, *http.Request) error { panic("boom") })
	}()
	// Client gone: next returns the context's error; released.
	ctx, cancel := context.WithCancel(context.Background())
	r := newReq("192.0.2.1:1")
	r = r.WithContext(ctx)
	serve(h, r, func(w http.ResponseWriter, r *http.Request) error {
		cancel()
		<-r.Context().Done()
		return r.Context().Err()
	})
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
		t.Fatalf("lease not released: code %d", res.code)
	}
}

// A concurrency lease taken by an earlier zone is given back when a later
// zone denies.
func TestConcurrencyUndoneOnLaterDenial(t *testing.T) {
	h := provision(t, `{"zones":[
		{"name":"c","algorithm":"concurrency","key":"k","limits":[{"events":1,"window":"1m"}]},
		{"name":"r","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	serve(h, newReq("192.0.2.1:1"))
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 || res.repl.ReplaceAll("{http.rate_limit.zone}", "") != "r" {
		t.Fatalf("code %d", res.code)
	}
	// The lease of the denied request was returned: a request of another
	// key in zone r... shares zone c's key "k", which must be free.
	h2 := h.rt.zones[0].store.(*store.Memory)
	if n := h2.Len(); n > 1 {
		t.Fatalf("keys %d", n)
	}
	d, _ := h.rt.zones[0].store.Take(context.Background(), "k", time.Time{}, 1)
	if !d.Allowed {
		t.Fatal("the concurrency lease of the denied request was not released")
	}
}

func TestWaitMode(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"5s",
		"limits":[{"events":1,"window":"1s"}]}]}`, clock)

	serve(h, newReq("192.0.2.1:1"))
	start := clock.Now()
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 200 || !res.called {
		t.Fatalf("waited request: code %d err %v", res.code, res.err)
	}
	if waited := clock.Now().Sub(start); waited < time.Second || waited > 1100*time.Millisecond {
		t.Fatalf("waited %s, want 1s", waited)
	}
}

func TestWaitModeMaxWait(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"w","key":"k","on_limit":"wait","max_wait":"2s",
		"limits":[{"events":1,"window":"10s"}]}]}`, clock)
	serve(h, newReq("192.0.2.1:1"))
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code != 429 || res.called {
		t.Fatalf("code %d", res.code)
	}
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("slept %v although the wait (10s) exceeds max_wait (2s)", s)
	}
	if res.hdr.Get("Retry-After") != "10" {
		t.Fatalf("Retry-After %q", res.hdr.Get("Retry-After"))
	}
}

func TestWaitModeClientGone(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[
		{"name":"site","key":"all","limits":[{"events":5,"window":"1m"}]},
		{"name":"w","key":"k","on_limit":"wait","max_wait":"5s","limits":[{"events":1,"window":"1s"}]}]}`, clock)
	serve(h, newReq("192.0.2.1:1")) // site 1/5
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newReq("192.0.2.1:1")
	res := serve(h, r.WithContext(ctx))
	var he caddyhttp.HandlerError
	if res.called || !errors.As(res.err, &he) || he.StatusCode != 499 {
		t.Fatalf("client gone while waiting: called %v err %v", res.called, res.err)
	}
	// site's unit for the abandoned request was given back: 3 more fit
	// after the first (1 + 3 = 4 of 5), plus this one.
	for i := 0; i < 4; i++ {
		clock.Advance(time.Second)
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
}

func TestLeakyBucketShaping(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"k","on_limit":"wait","max_wait":"10s",
		"limits":[{"events":2,"window":"1s"}],"burst":4}]}`, clock)
	// Four requests at once fit the bucket; with wait they are spaced out at
	// the rate (2/s): the n-th is held (n-1)*500ms.
	for i := 0; i < 4; i++ {
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("request %d: %d", i, res.code)
		}
	}
	slept := clock.Slept()
	if len(slept) != 3 {
		t.Fatalf("slept %v, want three delays", slept)
	}
	for _, d := range slept {
		if d <= 0 || d > 2*time.Second {
			t.Fatalf("delay %s", d)
		}
	}
}

func TestLeakyBucketRejectIgnoresDelay(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"l","algorithm":"leaky_bucket","key":"k","limits":[{"events":2,"window":"1s"}],"burst":4}]}`, clock)
	for i := 0; i < 4; i++ {
		serve(h, newReq("192.0.2.1:1"))
	}
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("reject mode slept %v", s)
	}
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
		t.Fatalf("5th: %d", res.code)
	}
}

func TestAllAlgorithmsLimit(t *testing.T) {
	for _, alg := range []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			h := provision(t, `{"zones":[{"name":"a","algorithm":"`+alg+`","key":"k","limits":[{"events":3,"window":"1h"}]}]}`, newClock())
			for i := 0; i < 3; i++ {
				if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
					t.Fatalf("request %d: %d", i+1, res.code)
				}
			}
			res := serve(h, newReq("192.0.2.1:1"))
			if res.code != 429 {
				t.Fatalf("4th: %d", res.code)
			}
			n, err := strconv.Atoi(res.hdr.Get("Retry-After"))
			if err != nil || n < 1 || n > 2*3600 {
				t.Fatalf("Retry-After %q", res.hdr.Get("Retry-After"))
			}
		})
	}
}

func TestProvisionErrors(t *testing.T) {
	for _, cfg := range []string{
		`{}`,
		`{"zones":[null]}`,
		`{"zones":[{"name":"a","key":"k"}]}`,
		`{"zones":[{"name":"a","key":"k","limits":[{"events":0,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","limits":[{"events":1,"window":0}]}]}`,
		`{"zones":[{"name":"a","key":"k","algorithm":"nope","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","ipv6_prefix":200,"limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","cost":"x","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","on_limit":"wait","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","empty_key":"maybe","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"headers":"some","zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"store":"disk","zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","match":[{"no_such_matcher":true}],"limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key_resolver":{"resolver":"no_such"},"limits":[{"events":1,"window":"1s"}]}]}`,
		`{"zones":[{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]},{"name":"a","key":"k","limits":[{"events":1,"window":"1s"}]}]}`,
	} {
		expectProvisionErr(t, cfg, "")
	}
}

// expectProvisionErr provisions the handler config (JSON) and fails the
// test unless that fails with an error saying want (any error for "").
func expectProvisionErr(t *testing.T, config, want string) {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(config), h); err != nil {
		t.Fatalf("%s: %v", config, err)
	}
	err := h.Provision(testContext(t))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %v, want one saying %q", config, err, want)
	}
	if err := h.Cleanup(); err != nil {
		t.Errorf("%s: cleanup: %v", config, err)
	}
}

// An unprovisioned handler passes everything through rather than panic.
func TestZeroHandler(t *testing.T) {
	var h Handler
	if res := serve(&h, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
		t.Fatalf("code %d", res.code)
	}
}

// provisionIn provisions config as a handler of srv (nil: outside any
// server) with the real clock and the shared pool; the caller cleans up.
func provisionIn(t *testing.T, config string, srv *caddyhttp.Server) *Handler {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(config), h); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if srv != nil {
		ctx = ctx.WithValue(caddyhttp.ServerCtxKey, srv)
	}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

func remaining(t *testing.T, h *Handler) string {
	t.Helper()
	res := serve(h, newReq("192.0.2.1:1"))
	if res.code == 429 {
		return "429"
	}
	return res.hdr.Get("X-RateLimit-Remaining")
}

type nopHandler struct{}

func (nopHandler) ServeHTTP(http.ResponseWriter, *http.Request) error { return nil }

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// cleared between requests.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

func benchServe(b *testing.B, config string) { benchServeIn(b, config, context.Background()) }

// benchServeIn is benchServe with the handler provisioned in parent (a
// server's context, say).
func benchServeIn(b *testing.B, config string, parent context.Context) {
	h := new(Handler)
	if err := json.Unmarshal([]byte(config), h); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: parent})
	defer cancel()
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer h.Cleanup()
	h.rt.logger = zap.NewNop()
	benchRequests(b, func(w http.ResponseWriter, r *http.Request) error {
		return h.ServeHTTP(w, r, nopHandler{})
	})
}

// benchRequests runs serve on a request per iteration with, as Caddy's
// server gives every request, a new replacer and new vars (their cost,
// BenchmarkRequestSetup, is in every figure).
func benchRequests(b *testing.B, serve func(http.ResponseWriter, *http.Request) error) {
	base := newReq("192.0.2.1:1234")
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		// As Caddy's server: its HTTP placeholders are a provider, and the
		// client_ip var is set.
		repl := caddy.NewReplacer()
		repl.Map(func(string) (any, bool) { return nil, false })
		ctx := context.WithValue(base.Context(), caddy.ReplacerCtxKey, repl)
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "192.0.2.1"})
		if err := serve(w, base.WithContext(ctx)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestSetup is the per-request setup of the ServeHTTP
// benchmarks alone, to subtract from their figures.
func BenchmarkRequestSetup(b *testing.B) {
	benchRequests(b, func(http.ResponseWriter, *http.Request) error { return nil })
}

func BenchmarkServeHTTPAllowed(b *testing.B) {
	benchServe(b, `{"zones":[{"name":"bench","key":"{http.request.remote.host}","algorithm":"gcra",
		"limits":[{"events":1000000000,"window":"1s"}]}]}`)
}

func BenchmarkServeHTTPAllowedHeadersOff(b *testing.B) {
	benchServe(b, `{"headers":"off","zones":[{"name":"bench","key":"{http.request.remote.host}","algorithm":"gcra",
		"limits":[{"events":1000000000,"window":"1s"}]}]}`)
}

func BenchmarkServeHTTPDenied(b *testing.B) {
	benchServe(b, `{"zones":[{"name":"bench","key":"{http.request.remote.host}","algorithm":"gcra",
		"limits":[{"events":1,"window":"1h"}]}]}`)
}

func BenchmarkServeHTTPDeniedSlidingLog(b *testing.B) {
	benchServe(b, `{"zones":[{"name":"bench","key":"{http.request.remote.host}",
		"limits":[{"events":10,"window":"1h"}]}]}`)
}

func TestLongKeysAreHashed(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"k","key":"{http.request.header.X-Key}","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	long := strings.Repeat("x", 10000)
	res := serve(h, newReq("192.0.2.1:1", header("X-Key", long)))
	if res.code != 200 {
		t.Fatalf("code %d", res.code)
	}
	key := res.repl.ReplaceAll("{http.rate_limit.key}", "")
	if len(key) != 65 || key[0] != '#' {
		t.Fatalf("key %q", key)
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", long))); res.code != 429 {
		t.Fatalf("same long key: %d", res.code)
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-Key", long+"y"))); res.code != 200 {
		t.Fatalf("another long key: %d", res.code)
	}
	// The hashed form, sent as a key, is a key of its own: it is hashed
	// too, and does not share the long key's count.
	res = serve(h, newReq("192.0.2.1:1", header("X-Key", key)))
	if res.code != 200 {
		t.Fatalf("the long key's hashed form %q sent as a key: %d, want its own count", key, res.code)
	}
	if got := res.repl.ReplaceAll("{http.rate_limit.key}", ""); got != hashKey(key) {
		t.Fatalf("key %q sent as a key became %q, want %q", key, got, hashKey(key))
	}
	// Byte for byte: a hashed key is a Redis key name's part, a running
	// fleet's data. 256 bytes are kept as they are.
	for in, want := range map[string]string{
		strings.Repeat("a", maxKeyLen+1): "#e8d95cc2b4bc198c54b40bd214df958afb65f5e73d2c2eafe0593cf5c635c1f0",
		strings.Repeat("a", maxKeyLen):   strings.Repeat("a", maxKeyLen),
	} {
		res := serve(h, newReq("192.0.2.1:1", header("X-Key", in)))
		if got := res.repl.ReplaceAll("{http.rate_limit.key}", ""); got != want {
			t.Errorf("a key of %d bytes became %q, want %q", len(in), got, want)
		}
	}
}

func TestWaitForConcurrencySlot(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"c","algorithm":"concurrency","key":"k","on_limit":"wait","max_wait":"1s",
		"limits":[{"events":1,"window":"1m"}]}]}`, clock)
	// Hold the slot; the waiting request polls, and is refused when
	// max_wait has passed.
	d, _ := h.rt.zones[0].store.Take(context.Background(), "k", time.Time{}, 1)
	if !d.Allowed {
		t.Fatal("setup")
	}
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 {
		t.Fatalf("code %d", res.code)
	}
	for _, s := range clock.Slept() {
		if s > leasePoll {
			t.Fatalf("slept %s at once, want polls of at most %s", s, leasePoll)
		}
	}
	if n := len(clock.Slept()); n < 10 {
		t.Fatalf("polled %d times", n)
	}
}

// FuzzHandlerJSON: no JSON configuration makes Provision or a request
// panic; a configuration is either refused or serves requests.
func FuzzHandlerJSON(f *testing.F) {
	for _, seed := range []string{
		perIP3,
		`{"zones":[{"name":"a","key":"{http.request.header.X}","cost":"{http.request.header.C}","empty_key":"deny","limits":[{"events":1,"window":1000000}]}]}`,
		`{"jitter":1,"zones":[{"name":"a","algorithm":"gcra","burst":9223372036854775807,"key":"k","limits":[{"events":9223372036854775807,"window":9223372036854775807}]}]}`,
		`{"zones":[{"name":"w","algorithm":"leaky_bucket","on_limit":"wait","max_wait":9223372036854775807,"key":"k","limits":[{"events":1,"window":1000000}]}]}`,
		`{"zones":[{"name":"c","algorithm":"concurrency","key":"k","limits":[{"events":1,"window":1000000}]}],"headers":"ietf","status":599}`,
		`{"zones":[{"name":"m","match":[{"path":["/x"]}],"key":"{http.request.remote}","ipv4_prefix":1,"ipv6_prefix":1,"limits":[{"events":2,"window":1000000},{"events":3,"window":2000000}]}]}`,
		`{"zones":[{"name":"n","key":"\\{x\\}","key_resolver":null,"cost":"\\{2\\}","match":[{"path":null}],"limits":[null,{"events":1,"window":"1s"}]}]}`,
		`{"store":"redis","redis":{"url":"redis://:6379/-1?dial_timeout=1","db":99999999999,"tls":{}},"zones":[{"name":"r","key":"k","limits":[{"events":1,"window":"1s"}]}]}`,
	} {
		f.Add(seed, "7")
	}
	f.Fuzz(func(t *testing.T, config, hdr string) {
		h := new(Handler)
		if err := json.Unmarshal([]byte(config), h); err != nil {
			return
		}
		clock := newClock()
		err := provisionOn(testContext(t), h, clock)
		defer h.Cleanup()
		if err != nil {
			return
		}
		h.rt.logger = zap.NewNop()
		if h.Store == "redis" {
			// Configuration only: no Redis runs here (the Redis
			// store is tested against real servers in redis_test.go).
			return
		}
		for i := 0; i < 3; i++ {
			r := newReq("192.0.2.1:1")
			r.Header["X"] = []string{hdr}
			r.Header["C"] = []string{hdr}
			serve(h, r)
			clock.Advance(time.Millisecond)
		}
	})
}

// testResolver is a guest key resolver: the value of a header, upper-cased
// by its configuration, or an error for "fail".
type testResolver struct {
	Header string `json:"header"`
}

func (testResolver) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rate_limit.key_resolvers.test_header",
		New: func() caddy.Module { return new(testResolver) },
	}
}

func (tr *testResolver) Key(r *http.Request) (string, error) {
	v := r.Header.Get(tr.Header)
	if v == "fail" {
		return "", errors.New("no key")
	}
	return strings.ToUpper(v), nil
}

func init() { caddy.RegisterModule(testResolver{}) }

func TestGuestKeyResolver(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"g","key_resolver":{"resolver":"test_header","header":"X-User"},
		"empty_key":"deny","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate after Provision: %v", err)
	}
	res := serve(h, newReq("192.0.2.1:1", header("X-User", "ann")))
	if res.code != 200 || res.repl.ReplaceAll("{http.rate_limit.key}", "") != "ANN" {
		t.Fatalf("code %d key %q", res.code, res.repl.ReplaceAll("{http.rate_limit.key}", ""))
	}
	if res := serve(h, newReq("192.0.2.1:1", header("X-User", "Ann"))); res.code != 429 {
		t.Fatalf("same key: %d", res.code)
	}
	// A resolver error counts as an empty key (here: denied).
	if res := serve(h, newReq("192.0.2.1:1", header("X-User", "fail"))); res.code != 429 {
		t.Fatalf("resolver error: %d", res.code)
	}
}

func TestErrorRoutesMayMatch(t *testing.T) {
	raw := []json.RawMessage{json.RawMessage(`{}`)}
	hostSet := func(hosts ...string) caddyhttp.MatcherSets {
		mh := caddyhttp.MatchHost(hosts)
		return caddyhttp.MatcherSets{{&mh}}
	}
	// byStatus is the handle of a site's handle_errors blocks, as the
	// Caddyfile writes it, one block a status expression ("" for none).
	byStatus := func(exprs ...string) string {
		var routes []string
		for _, e := range exprs {
			m := ""
			if e != "" {
				m = `"match":[{"expression":` + strconv.Quote(e) + `}],`
			}
			routes = append(routes, `{`+m+`"handle":[{"handler":"subroute","routes":[{"handle":[{"handler":"static_response"}]}]}]}`)
		}
		return `,"handle":[{"handler":"subroute","routes":[` + strings.Join(routes, ",") + `]}]`
	}
	const (
		in404     = "{http.error.status_code} in [404, 410]"
		in429     = "{http.error.status_code} in [404, 429]"
		range4xx  = "{http.error.status_code} >= 400 && {http.error.status_code} <= 499"
		range5xx  = "{http.error.status_code} >= 500 && {http.error.status_code} <= 599"
		otherExpr = "{http.request.uri.path} == '/x'"
	)
	for _, tc := range []struct {
		ours   caddyhttp.MatcherSets
		theirs []string // error routes' JSON
		want   bool
	}{
		{hostSet("b.test"), []string{`{"match":[{"host":["a.test"]}]}`}, false},
		{hostSet("b.test", "c.test"), []string{`{"match":[{"host":["a.test"]}]}`, `{"match":[{"host":["d.test"]}]}`}, false},
		{hostSet("b.test"), []string{`{"match":[{"host":["a.test","B.test"]}]}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["*.test"]}]}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["*.wild.test"]}]}`}, false},
		{hostSet("b.test"), []string{`{"match":[{"host":["*.*"]}]}`}, true},
		{hostSet("x.b.test"), []string{`{"match":[{"host":["*.test"]}]}`}, false},
		{hostSet("*.b.test"), []string{`{"match":[{"host":["x.B.test"]}]}`}, true},
		{hostSet("*.b.test"), []string{`{"match":[{"host":["x.c.test"]}]}`}, false},
		{hostSet("b.test"), []string{`{"match":[{"host":["{env.HOST}"]}]}`}, true},
		{hostSet("b.test"), []string{`{}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"path":["/x"]}]}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["a.test"],"path":["/x"]}]}`}, true},
		{hostSet("*.test"), []string{`{"match":[{"host":["a.test"]}]}`}, true},
		{nil, []string{`{"match":[{"host":["a.test"]}]}`}, true},
		{caddyhttp.MatcherSets{{caddyhttp.MatchPath{"/"}}}, []string{`{"match":[{"host":["a.test"]}]}`}, true},
		// The site's own handle_errors, for other statuses only.
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in404) + `}`}, false},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in404, range5xx) + `}`}, false},
		{nil, []string{`{` + byStatus(in404)[1:] + `}`}, false},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in429) + `}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(range4xx) + `}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in404, "") + `}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in404+" || "+range4xx) + `}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(otherExpr) + `}`}, true},
		{hostSet("b.test"), []string{`{"match":[{"host":["b.test"]}]` + byStatus(in404+" && true") + `}`}, true},
	} {
		srv := &caddyhttp.Server{
			Routes: caddyhttp.RouteList{{MatcherSets: tc.ours, HandlersRaw: raw}},
			Errors: &caddyhttp.HTTPErrorConfig{},
		}
		for _, js := range tc.theirs {
			var r caddyhttp.Route
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("%s: %v", js, err)
			}
			srv.Errors.Routes = append(srv.Errors.Routes, r)
		}
		if got := errorRoutesMayMatch(srv, 429); got != tc.want {
			t.Errorf("ours %v, theirs %v: got %v, want %v", tc.ours, tc.theirs, got, tc.want)
		}
	}
}

// failingStore fails every Take after the first n.
type failingStore struct {
	store.Store
	n int
}

func (f *failingStore) Take(ctx context.Context, key string, now time.Time, cost int64) (algorithms.Decision, error) {
	if f.n > 0 {
		f.n--
		return f.Store.Take(ctx, key, now, cost)
	}
	return algorithms.Decision{}, errors.New("store down")
}

func TestStoreFailureFailsOpen(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[
		{"name":"ok","key":"k","limits":[{"events":5,"window":"1m"}]},
		{"name":"down","key":"k","on_limit":"wait","max_wait":"10s","limits":[{"events":1,"window":"1s"}]}]}`, clock)
	h.rt.zones[1].store = &failingStore{Store: h.rt.zones[1].store, n: 2}
	// 1: admitted by both. 2: "down" denies, the wait's retry fails: let
	// through. 3: "down" fails at once: let through, reported by "ok".
	for i := 0; i < 3; i++ {
		res := serve(h, newReq("192.0.2.1:1"))
		if res.code != 200 || !res.called {
			t.Fatalf("request %d: code %d", i+1, res.code)
		}
		if i == 2 && res.hdr.Get("RateLimit-Policy") != `"ok";q=5;w=60` {
			t.Errorf("policy %q", res.hdr.Get("RateLimit-Policy"))
		}
	}
}

// On a denial, RateLimit's t is the time until more quota (as Retry-After);
// X-RateLimit-Reset the time until the tier is whole again.
func TestResetVersusRetry(t *testing.T) {
	clock := newClock()
	h := provision(t, perIP3, clock)
	for _, step := range []time.Duration{0, 20 * time.Second, 10 * time.Second} {
		clock.Advance(step)
		if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 {
			t.Fatalf("code %d", res.code)
		}
	}
	clock.Advance(10 * time.Second) // t0+40s
	res := serve(h, newReq("192.0.2.1:1"))
	expectHeaders(t, res, map[string]string{
		"Retry-After":       "20",
		"RateLimit":         `"api";r=0;t=20`,
		"X-RateLimit-Reset": "50",
	})
}

// serveNested runs a request through outer, then inner (as a site's
// handler and an inner route's), then a handler that answers 200.
func serveNested(outer, inner *Handler) result {
	r := newReq("192.0.2.1:1")
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
	return serve(outer, r, func(w http.ResponseWriter, r *http.Request) error {
		return inner.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(200)
			return nil
		}))
	})
}

// Two rate_limit handlers on one request (a site's and an inner route's):
// the placeholders describe the latest decision, the inner handler's
// rejection, whatever the outer one published before.
func TestPlaceholdersLatestHandler(t *testing.T) {
	outer := provision(t, `{"zones":[{"name":"outer","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	inner := provision(t, `{"zones":[{"name":"inner","key":"k","limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	for i, want := range []struct {
		code                   int
		zone, remaining, limit string
		exceeded               string
	}{
		{200, "inner", "0", "1", ""},
		{429, "inner", "0", "1", "inner"},
	} {
		res := serveNested(outer, inner)
		if res.code != want.code {
			t.Fatalf("request %d: code %d", i+1, res.code)
		}
		for ph, v := range map[string]string{
			"{http.rate_limit.zone}": want.zone, "{http.rate_limit.remaining}": want.remaining,
			"{http.rate_limit.limit}": want.limit, "{http.rate_limit.exceeded.name}": want.exceeded,
		} {
			if got := res.repl.ReplaceAll(ph, ""); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, ph, got, v)
			}
		}
	}
}

// Two rate_limit handlers on one request, the inner one writing only the
// legacy headers: the outer handler's RateLimit header keeps its value
// (the header values of a request share one array), and the legacy
// headers are the inner decision's.
func TestHeadersOfNestedHandlers(t *testing.T) {
	outer := provision(t, `{"zones":[{"name":"outer","key":"k","limits":[{"events":10,"window":"1m"}]}]}`, newClock())
	inner := provision(t, `{"headers":"legacy","zones":[{"name":"inner","key":"k","limits":[{"events":5,"window":"1m"}]}]}`, newClock())
	res := serveNested(outer, inner)
	if res.code != 200 {
		t.Fatalf("code %d", res.code)
	}
	expectHeaders(t, res, map[string]string{
		"RateLimit":             `"outer";r=9;t=60`,
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "4",
		"X-RateLimit-Reset":     "60",
	})
}
