package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// planZone's limit takes its events from the X-Limit header: 2 by default,
// at most 5.
const planZone = `{"zones":[{"name":"plan","key":"k","limits":[
	{"events":2,"window":"1m","events_placeholder":"{http.request.header.X-Limit}","max_events":5}]}]}`

// TestLimitsFromRequest: a request is held to the events its placeholder
// gives, within the ceiling, the default when the value is unusable, and
// the key's usage carries over from one value to the next; the headers
// report the limit that applied.
func TestLimitsFromRequest(t *testing.T) {
	testLimitsFromRequest(t, provision(t, planZone, newClock()))
}

// TestRedisLimitsFromRequest: the same with store redis: the key's state
// in Redis is decided under each request's limits.
func TestRedisLimitsFromRequest(t *testing.T) {
	srv := redistest.Start(t)
	config := strings.Replace(planZone, `{"zones"`, fmt.Sprintf(`{"store":"redis","redis":{"addresses":[%q]},"zones"`, srv.Addr), 1)
	testLimitsFromRequest(t, provision(t, config, nil))
}

func testLimitsFromRequest(t *testing.T, h *Handler) {
	t.Helper()
	steps := []struct {
		limit           string // X-Limit, "" for none
		code            int
		applied, remain string
		policy          string
	}{
		{"", 200, "2", "1", `"plan";q=2;w=60`},                     // the default
		{"4", 200, "4", "2", `"plan";q=4;w=60`},                    // 2 used of 4
		{"abc", 429, "2", "0", `"plan";q=2;w=60`},                  // unusable: the default, 2 used
		{"1000", 200, "5", "2", `"plan";q=5;w=60`},                 // capped at the ceiling
		{"99999999999999999999", 200, "5", "1", `"plan";q=5;w=60`}, // beyond int64: the ceiling
		{"-3", 429, "2", "0", `"plan";q=2;w=60`},
		{"5", 200, "5", "0", `"plan";q=5;w=60`},
		{"5", 429, "5", "0", `"plan";q=5;w=60`},
	}
	for i, s := range steps {
		var opts []reqOpt
		if s.limit != "" {
			opts = append(opts, header("X-Limit", s.limit))
		}
		res := serve(h, newReq("192.0.2.1:1", opts...))
		if res.code != s.code || res.hdr.Get("X-RateLimit-Limit") != s.applied ||
			res.hdr.Get("X-RateLimit-Remaining") != s.remain || res.hdr.Get("RateLimit-Policy") != s.policy {
			t.Fatalf("step %d (X-Limit %q): code %d, limit %s, remaining %s, policy %s; want %d, %s, %s, %s", i, s.limit,
				res.code, res.hdr.Get("X-RateLimit-Limit"), res.hdr.Get("X-RateLimit-Remaining"), res.hdr.Get("RateLimit-Policy"),
				s.code, s.applied, s.remain, s.policy)
		}
	}
}

// TestLimitsFromRequestBounded: a flood of distinct values keeps at most
// maxReqLimits zones ready; the values beyond are decided all the same.
func TestLimitsFromRequestBounded(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"plan","key":"{http.request.header.X-Key}","limits":[
		{"events":2,"window":"1m","events_placeholder":"{http.request.header.X-Limit}","max_events":100000}]}]}`, newClock())
	for i := range 1000 {
		n := strconv.Itoa(3 + i)
		res := serve(h, newReq("192.0.2.1:1", header("X-Limit", n), header("X-Key", n)))
		if res.code != 200 || res.hdr.Get("X-RateLimit-Limit") != n {
			t.Fatalf("X-Limit %s: code %d, limit %s", n, res.code, res.hdr.Get("X-RateLimit-Limit"))
		}
	}
	rl := h.rt.zones[0].reqLimits
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if n := len(rl.zones); n != maxReqLimits {
		t.Fatalf("%d sets of limits kept, want %d", n, maxReqLimits)
	}
}

// TestValidateLimitsFromRequest: an events placeholder needs a ceiling no
// lower than its default; a ceiling needs a placeholder; limits from the
// request do not work with sync_interval.
func TestValidateLimitsFromRequest(t *testing.T) {
	zone := func(l Limit) *Zone {
		z := validZone("p")
		z.Limits = []Limit{l}
		return z
	}
	w := caddy.Duration(time.Minute)
	tests := []struct {
		name string
		h    Handler
		want string // "" when valid
	}{
		{"valid", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, EventsPlaceholder: "{plan}", MaxEvents: 5000})}}, ""},
		{"no ceiling", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, EventsPlaceholder: "{plan}"})}}, "need a ceiling"},
		{"no default", Handler{Zones: []*Zone{zone(Limit{Window: w, EventsPlaceholder: "{plan}", MaxEvents: 5000})}}, "{plan} need a default: events"},
		{"default above ceiling", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, EventsPlaceholder: "{plan}", MaxEvents: 50})}}, "above the ceiling 50"},
		{"ceiling beyond bounds", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, EventsPlaceholder: "{plan}", MaxEvents: 1 << 51})}}, "events must be at most"},
		{"ceiling without placeholder", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, MaxEvents: 500})}}, "only with an events placeholder"},
		{"no placeholder in it", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, EventsPlaceholder: "plan", MaxEvents: 500})}}, "has no placeholder"},
		{"window", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, WindowPlaceholder: "{w}", MinWindow: caddy.Duration(time.Second)})}}, ""},
		{"window without floor", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, WindowPlaceholder: "{w}"})}}, "needs a floor"},
		{"window without default", Handler{Zones: []*Zone{zone(Limit{Events: 100, WindowPlaceholder: "{w}", MinWindow: caddy.Duration(time.Second)})}}, "{w} needs a default: window"},
		{"window floor above default", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, WindowPlaceholder: "{w}", MinWindow: caddy.Duration(time.Hour)})}}, "shorter than the floor"},
		{"window floor without placeholder", Handler{Zones: []*Zone{zone(Limit{Events: 100, Window: w, MinWindow: caddy.Duration(time.Second)})}}, "only with a window placeholder"},
		{"with sync_interval", Handler{Store: "redis", SyncInterval: caddy.Duration(time.Second),
			Zones: []*Zone{func() *Zone {
				z := zone(Limit{Events: 100, Window: w, EventsPlaceholder: "{plan}", MaxEvents: 5000})
				z.Algorithm = "fixed_window"
				return z
			}()}}, "sync_interval does not work with limits from placeholders"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestWindowFromRequest: a window from the request, within its floor; the
// policy of the tier is named by the window it applied.
func TestWindowFromRequest(t *testing.T) {
	clock := newClock()
	h := provision(t, `{"zones":[{"name":"plan","key":"k","limits":[
		{"events":2,"window":"1m","window_placeholder":"{http.request.header.X-Window}","min_window":"10s"}]}]}`, clock)
	steps := []struct {
		advance        time.Duration
		window         string
		code           int
		remain, policy string
	}{
		{0, "", 200, "1", `"plan";q=2;w=60`},
		{0, "1h", 200, "0", `"plan-1h";q=2;w=3600`},
		{0, "1h", 429, "0", `"plan-1h";q=2;w=3600`},
		{0, "1s", 429, "0", `"plan-10s";q=2;w=10`}, // the floor
		{0, "soon", 429, "0", `"plan";q=2;w=60`},   // unusable: the default
		{11 * time.Second, "1s", 200, "1", `"plan-10s";q=2;w=10`},
		// Back to 1m: the 10s window dropped the units of t0 from the log
		// (a sliding log keeps what its window holds): 2 used, this one.
		{0, "", 200, "0", `"plan";q=2;w=60`},
		{0, "", 429, "0", `"plan";q=2;w=60`},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		var opts []reqOpt
		if s.window != "" {
			opts = append(opts, header("X-Window", s.window))
		}
		res := serve(h, newReq("192.0.2.1:1", opts...))
		if res.code != s.code || res.hdr.Get("X-RateLimit-Remaining") != s.remain || res.hdr.Get("RateLimit-Policy") != s.policy {
			t.Fatalf("step %d (X-Window %q): code %d, remaining %s, policy %s; want %d, %s, %s", i, s.window,
				res.code, res.hdr.Get("X-RateLimit-Remaining"), res.hdr.Get("RateLimit-Policy"), s.code, s.remain, s.policy)
		}
	}
}

// A limit another one shadows (same window, no more events) is found;
// limits of different windows, or from placeholders, are not.
func TestShadowedLimit(t *testing.T) {
	lim := func(events int64, w time.Duration) Limit { return Limit{Events: events, Window: caddy.Duration(w)} }
	fromReq := lim(5, time.Minute)
	fromReq.EventsPlaceholder, fromReq.MaxEvents = "{http.vars.n}", 50
	for _, tc := range []struct {
		name       string
		limits     []Limit
		ok         bool
		shadow, by int
	}{
		{"one", []Limit{lim(5, time.Minute)}, false, 0, 0},
		{"windows differ", []Limit{lim(5, time.Minute), lim(100, time.Hour)}, false, 0, 0},
		{"more events, same window", []Limit{lim(10, time.Minute), lim(5, time.Minute)}, true, 0, 1},
		{"the smaller first", []Limit{lim(100, time.Hour), lim(5, time.Minute), lim(10, time.Minute)}, true, 2, 1},
		{"written twice", []Limit{lim(5, time.Minute), lim(5, time.Minute)}, true, 1, 0},
		{"from a placeholder", []Limit{fromReq, lim(10, time.Minute)}, false, 0, 0},
	} {
		i, j, ok := shadowedLimit(tc.limits)
		if ok != tc.ok || (ok && (i != tc.shadow || j != tc.by)) {
			t.Errorf("%s: shadowed %d by %d (%v), want %d by %d (%v)", tc.name, i, j, ok, tc.shadow, tc.by, tc.ok)
		}
	}
}
