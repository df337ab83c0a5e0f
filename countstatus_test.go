package ratelimit

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// loginZone is a zone of 3 failed logins (401) per minute per address,
// with extra zone members (each followed by a comma) and handler members
// (each followed by a comma).
func loginZone(zoneExtra, handlerExtra string) string {
	return addrZone("login", `"count_status":[401],"limits":[{"events":3,"window":"1m"}]`, zoneExtra, handlerExtra)
}

// addrZone is a handler of one zone, name, keyed by the client's address,
// with the zone's members, extra zone members and handler members (each
// extra member followed by a comma).
func addrZone(name, members, zoneExtra, handlerExtra string) string {
	return `{` + handlerExtra + `"zones":[{"name":"` + name + `","key":"{http.request.remote.host}",` + zoneExtra + members + `}]}`
}

// login is a next handler that answers 401 unless the request carries the
// right password, as a login form would.
func login(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("X-Password") != "secret" {
		w.WriteHeader(http.StatusUnauthorized)
		return nil
	}
	_, err := w.Write([]byte("welcome"))
	return err
}

var rightPassword = header("X-Password", "secret")

// expectLogin serves a login attempt and fails the test unless it got code
// (429: refused before next), with X-RateLimit-Remaining remaining ("" for
// no check).
func expectLogin(t *testing.T, h *Handler, what string, code int, remaining string, opts ...reqOpt) result {
	t.Helper()
	res := serve(h, newReq("192.0.2.1:1000", opts...), login)
	if res.err != nil || res.code != code || res.called == (code == 429) {
		t.Fatalf("%s: code %d err %v called %v, want %d", what, res.code, res.err, res.called, code)
	}
	if remaining != "" {
		if got := res.hdr.Get("X-RateLimit-Remaining"); got != remaining {
			t.Fatalf("%s: X-RateLimit-Remaining %q, want %q", what, got, remaining)
		}
	}
	return res
}

// The counts of a count_status zone: successful logins are given back
// (each shows the provisional count, 2, and leaves 3), failed ones stay, and
// once they reach the limit every attempt is refused before next, the
// right password too, until the window has passed.
func TestCountStatusCountsMatchingResponses(t *testing.T) {
	testCountStatusCounts(t, loginZone("", ""), newClock())
}

func testCountStatusCounts(t *testing.T, config string, clock *testClock) {
	h := provision(t, config, clock)
	for i := range 5 {
		expectLogin(t, h, "right password "+strconv.Itoa(i+1), 200, "2", rightPassword)
	}
	expectLogin(t, h, "wrong password 1", 401, "2")
	expectLogin(t, h, "right password after a failure", 200, "1", rightPassword)
	expectLogin(t, h, "wrong password 2", 401, "1")
	expectLogin(t, h, "wrong password 3", 401, "0")
	res := expectLogin(t, h, "right password, locked out", 429, "0", rightPassword)
	if res.hdr.Get("Retry-After") == "" {
		t.Error("no Retry-After on the refusal")
	}
	expectLogin(t, h, "wrong password, locked out", 429, "0")
	if clock == nil {
		return // the Redis case: its clock is Redis's
	}
	clock.Advance(time.Minute)
	expectLogin(t, h, "after the window", 200, "2", rightPassword)
}

// The same counts with the redis store.
func TestCountStatusRedis(t *testing.T) {
	srv := redistest.Start(t)
	config := loginZone("", `"store":"redis","redis":{"addresses":["`+srv.Addr+`"]},`)
	testCountStatusCounts(t, config, nil)
	expectKey(t, srv.Addr, "rl:login:*", "rl:login:{192.0.2.1}")
	// A denial is not cached until its Retry-After: units given back
	// after a response may admit the key sooner.
	if h := provision(t, config, nil); h.rt.zones[0].denies != nil {
		t.Error("a count_status zone caches its denials")
	}
}

// A class (4 for 4xx), several codes, errors returned by next and panics
// count as their status.
func TestCountStatusOfErrorsAndClasses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		codes   string
		next    func(http.ResponseWriter, *http.Request) error
		counted bool
	}{
		{"class matches", "[4]", func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(403); return nil }, true},
		{"class does not match", "[4]", func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(302); return nil }, false},
		{"second code", "[401, 403]", func(w http.ResponseWriter, _ *http.Request) error { w.WriteHeader(403); return nil }, true},
		{"implicit 200", "[4, 5]", func(w http.ResponseWriter, _ *http.Request) error { _, err := w.Write([]byte("x")); return err }, false},
		{"nothing written is 200", "[200]", func(http.ResponseWriter, *http.Request) error { return nil }, true},
		{"handler error", "[401]", func(http.ResponseWriter, *http.Request) error {
			return caddyhttp.Error(401, errors.New("who are you"))
		}, true},
		{"handler error of another status", "[401]", func(http.ResponseWriter, *http.Request) error {
			return caddyhttp.Error(502, errors.New("upstream down"))
		}, false},
		{"plain error is 500", "[500]", func(http.ResponseWriter, *http.Request) error { return errors.New("boom") }, true},
		{"status written before an error", "[200]", func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(200)
			return caddyhttp.Error(502, errors.New("upstream broke mid-body"))
		}, true},
		{"informational first", "[401]", func(w http.ResponseWriter, _ *http.Request) error {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(401)
			return nil
		}, true},
		{"panic is 500", "[500]", func(http.ResponseWriter, *http.Request) error { panic("boom") }, true},
		{"panic is not 401", "[401]", func(http.ResponseWriter, *http.Request) error { panic("boom") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := provision(t, `{"zones":[{"name":"z","key":"k","count_status":`+tc.codes+`,
				"limits":[{"events":2,"window":"1m"}]}]}`, newClock())
			func() {
				defer func() { _ = recover() }()
				serve(h, newReq("192.0.2.1:1"), tc.next)
			}()
			want := "1" // the probe's own unit only
			if tc.counted {
				want = "0"
			}
			res := serve(h, newReq("192.0.2.1:1"), func(w http.ResponseWriter, _ *http.Request) error {
				w.WriteHeader(200)
				return nil
			})
			if got := res.hdr.Get("X-RateLimit-Remaining"); got != want {
				t.Fatalf("remaining after it %q, want %q (counted: %v)", got, want, tc.counted)
			}
		})
	}
}

// A request in flight counts provisionally: a concurrent one of the key
// is refused while it runs, and admitted once its response did not match.
func TestCountStatusProvisionalWhileInFlight(t *testing.T) {
	h := provision(t, `{"zones":[{"name":"z","key":"k","count_status":[401],
		"limits":[{"events":1,"window":"1m"}]}]}`, newClock())
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan result)
	go func() {
		done <- serve(h, newReq("192.0.2.1:1"), func(w http.ResponseWriter, _ *http.Request) error {
			close(inside)
			<-leave
			w.WriteHeader(200)
			return nil
		})
	}()
	<-inside
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 429 || res.called {
		t.Fatalf("concurrent request: code %d called %v, want a refusal", res.code, res.called)
	}
	close(leave)
	if res := <-done; res.code != 200 {
		t.Fatalf("first request: code %d", res.code)
	}
	if res := serve(h, newReq("192.0.2.1:1")); res.code != 200 || !res.called {
		t.Fatalf("after a 200: code %d, want admitted", res.code)
	}
}

// Each zone settles on its own: a count_status zone gives back what a
// plain zone keeps, and a later zone's denial gives back the count_status
// zone's provisional unit at once.
func TestCountStatusSeveralZones(t *testing.T) {
	h := provision(t, `{"zones":[
		{"name":"failures","key":"k","count_status":[401],"limits":[{"events":2,"window":"1m"}]},
		{"name":"all","key":"k","limits":[{"events":3,"window":"1m"}]}]}`, newClock())
	failures, all := h.rt.zones[0], h.rt.zones[1]
	remaining := func(z *zone) int64 {
		t.Helper()
		// A Take and its Undo: what a request would see, left as it was.
		d, err := z.store.Take(t.Context(), "k", time.Time{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return 0
		}
		if err := z.store.Undo(t.Context(), "k", time.Time{}, 1, d); err != nil {
			t.Fatal(err)
		}
		return d.Remaining + 1
	}
	expectLogin(t, h, "login 1", 200, "", rightPassword)
	expectLogin(t, h, "login 2", 401, "")
	if f, a := remaining(failures), remaining(all); f != 1 || a != 1 {
		t.Fatalf("remaining failures %d all %d, want 1 and 1", f, a)
	}
	expectLogin(t, h, "login 3", 200, "", rightPassword)
	// Zone all is used up: the next is refused by it, and zone failures's
	// provisional unit is given back then, not at the response.
	res := expectLogin(t, h, "login 4", 429, "")
	if got := res.repl.ReplaceAll("{http.rate_limit.zone}", ""); got != "all" {
		t.Fatalf("refused by zone %q, want all", got)
	}
	if f := remaining(failures); f != 1 {
		t.Fatalf("remaining failures %d after a refusal by another zone, want 1", f)
	}
}

// dry_run counts the same way, and never refuses.
func TestCountStatusDryRun(t *testing.T) {
	h := provision(t, loginZone("", `"dry_run":true,`), newClock())
	expectLogin(t, h, "right password", 200, "2", rightPassword)
	for i, want := range []string{"2", "1", "0"} {
		expectLogin(t, h, "wrong password "+strconv.Itoa(i+1), 401, want)
	}
	// Over the limit: let through, and reported as 0 remaining.
	expectLogin(t, h, "over the limit", 200, "0", rightPassword)
	expectLogin(t, h, "still over the limit", 200, "0", rightPassword)
}

// With on_limit wait, a successful request's unit given back lets the next
// one in without a wait; a failed one's makes it wait for the window.
func TestCountStatusWait(t *testing.T) {
	clock := newClock()
	h := provision(t, loginZone(`"on_limit":"wait","max_wait":"1m",`, ""), clock)
	for i := range 4 {
		expectLogin(t, h, "right password "+strconv.Itoa(i+1), 200, "2", rightPassword)
	}
	if s := clock.Slept(); len(s) != 0 {
		t.Fatalf("slept %v, want no wait", s)
	}
	for i := range 3 {
		expectLogin(t, h, "wrong password "+strconv.Itoa(i+1), 401, "")
	}
	expectLogin(t, h, "waits for a unit", 200, "", rightPassword)
	if s := clock.Slept(); len(s) == 0 {
		t.Fatal("admitted over the limit without waiting")
	}
}

// With count_rejected the refusals count too, as they do without
// count_status: hammering keeps the key locked out.
func TestCountStatusCountRejected(t *testing.T) {
	clock := newClock()
	h := provision(t, loginZone(`"count_rejected":true,`, ""), clock)
	for range 3 {
		expectLogin(t, h, "wrong password", 401, "")
	}
	clock.Advance(30 * time.Second)
	expectLogin(t, h, "refused, and counted", 429, "", rightPassword)
	clock.Advance(30*time.Second + time.Millisecond)
	// The failures have left the window; the refusal has not.
	expectLogin(t, h, "after the failures' window", 200, "1", rightPassword)
}

// Only requests a count_status zone admitted see a wrapped writer; the
// wrapper keeps Flush, Hijack and http.ResponseController working.
func TestCountStatusWriter(t *testing.T) {
	h := provision(t, `{"zones":[
		{"name":"plain","key":"k","limits":[{"events":100,"window":"1m"}]},
		{"name":"failures","match":[{"path":["/login"]}],"key":"k","count_status":[401],"limits":[{"events":100,"window":"1m"}]}]}`, newClock())
	var wrapped bool
	seeWriter := func(w http.ResponseWriter, _ *http.Request) error {
		_, wrapped = w.(*statusWriter)
		return nil
	}
	serve(h, newReq("192.0.2.1:1", path("/page")), seeWriter)
	if wrapped {
		t.Error("a request no count_status zone admitted got a wrapped writer")
	}
	serve(h, newReq("192.0.2.1:1", path("/login")), seeWriter)
	if !wrapped {
		t.Fatal("a request a count_status zone admitted has no status recorder")
	}

	rec := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
	sw := &statusWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: rec}}
	if err := http.NewResponseController(sw).Flush(); err != nil {
		t.Fatalf("ResponseController Flush: %v", err)
	}
	if !rec.Flushed || sw.status != 200 {
		t.Fatalf("flushed %v, status %d: want the flush passed on, and 200", rec.Flushed, sw.status)
	}
	if _, _, err := sw.Hijack(); err != nil || !rec.hijacked {
		t.Fatalf("Hijack: %v, hijacked %v", err, rec.hijacked)
	}
	if n, err := sw.ReadFrom(strings.NewReader("body")); err != nil || n != 4 || rec.Body.String() != "body" {
		t.Fatalf("ReadFrom: %d %v, body %q", n, err, rec.Body.String())
	}
}

type hijackRecorder struct {
	*httptest.ResponseRecorder
	hijacked bool
}

func (r *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return nil, nil, nil
}

func TestCountStatusValidate(t *testing.T) {
	for _, tc := range []struct {
		zone, want string
	}{
		{`"count_status":[600]`, "count_status: 600 is not a status code (100 to 599) or class (1 to 5, as in 4xx)"},
		{`"count_status":[0]`, "count_status: 0 is not a status code"},
		{`"count_status":[42]`, "count_status: 42 is not a status code"},
		{`"count_status":[401],"algorithm":"concurrency"`, "count_status does not apply to algorithm concurrency"},
		{`"count_status":[401,403,401]`, "count_status: 401 given twice"},
		{`"count_status":[4,4]`, "count_status: 4xx given twice"},
		{`"count_status":[401,4]`, "count_status: 401 is in 4xx, given too"},
		{`"count_status":[5,429,4]`, "count_status: 429 is in 4xx, given too"},
	} {
		h := new(Handler)
		if err := json.Unmarshal([]byte(`{"zones":[{"name":"z","key":"k",`+tc.zone+`,"limits":[{"events":1,"window":"1m"}]}]}`), h); err != nil {
			t.Fatal(err)
		}
		err := h.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate: %v, want %q", tc.zone, err, tc.want)
		}
	}
	for _, ok := range []string{`[401]`, `[4, 5]`, `[100, 599]`, `[]`} {
		h := new(Handler)
		if err := json.Unmarshal([]byte(`{"zones":[{"name":"z","key":"k","count_status":`+ok+`,"limits":[{"events":1,"window":"1m"}]}]}`), h); err != nil {
			t.Fatal(err)
		}
		if err := h.Validate(); err != nil {
			t.Errorf("count_status %s: %v", ok, err)
		}
	}
}

func TestCountStatusCaddyfileErrors(t *testing.T) {
	zone := func(lines string) string {
		return ":8080 {\n\trate_limit {\n\t\tzone z {\n" + lines + "\n\t\t}\n\t}\n\trespond \"ok\"\n}\n"
	}
	for _, tc := range []struct {
		name, caddyfile string
		want            []string
	}{
		{"no codes", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_status"), []string{"Caddyfile:6", "count_status takes one or more status codes"}},
		{"not a code", zone("\t\t\tkey k\n\t\t\tcount_status 401 bad\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", `count_status: "bad" is not a status code`}},
		{"class out of range", zone("\t\t\tkey k\n\t\t\tcount_status 6xx\n\t\t\tlimit 1 1s"), []string{"Caddyfile:5", "count_status: 6 is not a status code"}},
		{"code out of range", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_status 401 1000"), []string{"Caddyfile:6", "count_status: 1000 is not a status code"}},
		{"concurrency", zone("\t\t\tkey k\n\t\t\talgorithm concurrency\n\t\t\tlimit 1 1m\n\t\t\tcount_status 401"), []string{"Caddyfile:7", "count_status does not apply to algorithm concurrency"}},
		{"code twice", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_status 4xx 4XX"), []string{"Caddyfile:6", "count_status: 4xx given twice"}},
		{"duplicate", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_status 401\n\t\t\tcount_status 403"), []string{"Caddyfile:7", "count_status already specified (at line 6)"}},
		{"block", zone("\t\t\tkey k\n\t\t\tlimit 1 1s\n\t\t\tcount_status 401 {\n\t\t\t\tx\n\t\t\t}"), []string{"Caddyfile:6", "count_status does not take a block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := adaptCaddyfile(t, tc.caddyfile)
			if err == nil {
				t.Fatal("adapted without error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
