// Package integration runs the rate_limit handler inside a real Caddy
// (Caddy's caddytest harness: an in-process Caddy whose admin API listens on
// a free port of localhost, loaded with Caddyfiles through /load).
//
// Every test uses zone names of its own: the state of a zone survives a
// config load when the zone is unchanged, which is what TestReload checks,
// and what would otherwise carry counts from one test into the next.
// Windows are long (a minute or more) so that no result depends on timing.
package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/zonelimit/caddy-ratelimit"
)

// live is the package's Caddy.
var live = caddytesting.New("1ns")

func TestMain(m *testing.M) { live.Main(m) }

// respondOK and respondKey are the directives of a site that answers "ok"
// and one that answers the request's key.
const (
	respondOK  = `respond "ok"`
	respondKey = `respond "{http.rate_limit.key}"`
)

// clientA is the header of most tests' client.
func clientA() []string { return []string{"X-Client", "a"} }

// limitedSites is the sites a.test and b.test, each with the rate_limit
// block rateLimit (one snippet that both import), then its own directives.
func limitedSites(rateLimit, a, b string) string {
	return fmt.Sprintf(`
(limited) {
	rate_limit {
%s
	}
}
http://a.test {
	import limited
	%s
}
http://b.test {
	import limited
	%s
}`, rateLimit, a, b)
}

func TestLimitAndHeaders(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_basic", caddytesting.ClientKey, "limit 3 1m"), respondOK))
	for i := 0; i < 3; i++ {
		r := live.Get(t, "/", clientA()...)
		caddytesting.ExpectCode(t, r, 200, fmt.Sprintf("request %d", i+1))
		if r.Body != "ok" {
			t.Fatalf("body %q", r.Body)
		}
		rem := strconv.Itoa(2 - i)
		for k, want := range map[string]string{
			"RateLimit-Policy":      `"it_basic";q=3;w=60`,
			"RateLimit":             `"it_basic";r=` + rem + `;t=60`,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": rem,
			"X-RateLimit-Reset":     "60",
		} {
			got := r.Header.Get(k)
			if k == "RateLimit" || k == "X-RateLimit-Reset" {
				// Reset may be a second less if a second boundary passed.
				got = strings.Replace(got, "t=59", "t=60", 1)
				if got == "59" {
					got = "60"
				}
			}
			if got != want {
				t.Errorf("request %d: %s = %q, want %q", i+1, k, r.Header.Get(k), want)
			}
		}
		if r.Header.Get("Retry-After") != "" {
			t.Errorf("Retry-After on an admitted request")
		}
	}
	r := live.Get(t, "/", clientA()...)
	caddytesting.ExpectCode(t, r, 429, "4th request")
	if r.Body != "" {
		t.Errorf("body of the 429: %q, want empty", r.Body)
	}
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
	if r.Header.Get("X-RateLimit-Remaining") != "0" || !strings.HasPrefix(r.Header.Get("RateLimit"), `"it_basic";r=0;t=`) {
		t.Errorf("headers of the 429: %v", r.Header)
	}

	// Another key has its own count.
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "b"), 200, "other client")
}

func TestMatchersAndZones(t *testing.T) {
	live.LoadSites(t, live.Site(
		caddytesting.Zone("it_login", caddytesting.MatchPath("/login"), caddytesting.ClientKey, "limit 2 1m")+
			caddytesting.Zone("it_site", caddytesting.ClientKey, "limit 4 1m"),
		respondOK))
	// login counts in both zones; other paths only in the site zone.
	r := live.ExpectCodes(t, "/login", clientA(), 200, 200, 429)
	if !strings.HasPrefix(r.Header.Get("RateLimit"), `"it_login";`) {
		t.Errorf("denied by it_login, RateLimit %q", r.Header.Get("RateLimit"))
	}
	caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"it_login";q=2;w=60`)
	// The denied login consumed nothing in it_site: 2 of 4 used.
	r = live.ExpectCodes(t, "/page", clientA(), 200)
	caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"it_site";q=4;w=60`)
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Remaining", "1")
	live.ExpectCodes(t, "/page", clientA(), 200, 429)
}

func TestTiers(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_tiers", caddytesting.ClientKey, "limit 2 1m", "limit 3 1h"), respondOK))
	r := live.ExpectCodes(t, "/", clientA(), 200)
	// One policy per tier, named by its window.
	caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"it_tiers-1m";q=2;w=60, "it_tiers-1h";q=3;w=3600`)
	r = live.ExpectCodes(t, "/", clientA(), 200, 429)
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", "2") // the refusing tier's
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"it_tiers-1m";r=0;t=`) {
		t.Errorf("RateLimit %q does not name the refusing tier", got)
	}
}

func TestReloadKeepsCounts(t *testing.T) {
	testReloadKeepsCounts(t, "it_reload", "")
}

// testReloadKeepsCounts: a zone's count goes on across reloads, and a
// changed limit applies at once to what was counted, lowered or raised.
// options are the rate_limit block's store options.
func testReloadKeepsCounts(t *testing.T, zone, options string) {
	site := func(events int, body string) string {
		return live.Site(caddytesting.Zone(zone, caddytesting.ClientKey, fmt.Sprintf("limit %d 1h", events))+options,
			fmt.Sprintf("respond %q", body))
	}
	live.LoadSites(t, site(5, "one"))
	live.ExpectCodes(t, "/", clientA(), 200, 200) // before the reload

	// The same config again, then a different config with the same zone:
	// the count continues.
	live.LoadSites(t, site(5, "one"))
	caddytesting.ExpectHeader(t, live.Get(t, "/", clientA()...), "X-RateLimit-Remaining", "2")
	live.LoadSites(t, site(5, "two"))
	r := live.Get(t, "/", clientA()...)
	if r.Body != "two" {
		t.Fatalf("new config not active: body %q", r.Body)
	}
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Remaining", "1")

	// A lowered limit applies at once to the 4 units counted: denied.
	live.LoadSites(t, site(2, "three"))
	r = live.ExpectCodes(t, "/", clientA(), 429)
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", "2")
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Remaining", "0")

	// A raised one gives the difference: 10 - 4, and this request.
	live.LoadSites(t, site(10, "four"))
	r = live.ExpectCodes(t, "/", clientA(), 200)
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", "10")
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Remaining", "5")
}

func TestHandleErrors(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_errors", caddytesting.ClientKey, "limit 1 1m"), respondOK+`
	handle_errors {
		respond "limited by {http.rate_limit.zone}, retry in {http.rate_limit.retry_after}s ({err.status_code})"
	}`))
	r := live.ExpectCodes(t, "/", clientA(), 200, 429)
	want := "limited by it_errors, retry in " + r.Header.Get("Retry-After") + "s (429)"
	if r.Body != want {
		t.Fatalf("body %q, want %q", r.Body, want)
	}
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
	if r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("rate-limit headers lost on the error path: %v", r.Header)
	}
}

func TestStatusAndHeaderModes(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_status", caddytesting.ClientKey, "limit 1 1m")+"status 503\nheaders ietf", respondOK))
	r := live.Get(t, "/", clientA()...)
	if r.Header.Get("X-RateLimit-Limit") != "" || r.Header.Get("RateLimit") == "" {
		t.Fatalf("headers ietf: %v", r.Header)
	}
	r = live.Get(t, "/", clientA()...)
	caddytesting.ExpectCode(t, r, 503, "denied")
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
}

func TestDryRun(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_dry", caddytesting.ClientKey, "limit 1 1m")+"dry_run", respondOK))
	live.ExpectCodes(t, "/", clientA(), 200, 200, 200)
	if r := live.Get(t, "/", clientA()...); r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("dry run headers: %v", r.Header)
	}
}

func TestEmptyKeyAndCost(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_tenant",
		"key {http.request.header.X-Tenant}", "empty_key deny", "cost {http.request.header.X-Cost}", "limit 10 1m"), respondOK))
	caddytesting.ExpectCode(t, live.Get(t, "/"), 429, "no tenant")
	r := live.Get(t, "/", "X-Tenant", "t1", "X-Cost", "7")
	caddytesting.ExpectCode(t, r, 200, "cost 7")
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Remaining", "3")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Tenant", "t1", "X-Cost", "4"), 429, "cost 4 of 3")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Tenant", "t1", "X-Cost", "bogus"), 200, "bogus cost counts 1")
}

func TestMholtCompatible(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_mholt", "key {remote_host}", "events 2", "window 1m")+
		"jitter 0.1\nsweep_interval 30s", respondOK))
	r := live.ExpectCodes(t, "/", nil, 200, 200, 429)
	caddytesting.ExpectRetryAfter(t, r, 1, 66)
}

func TestIPv6Prefix(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_v6",
		"key {http.request.header.X-Real-IP}", "ipv6_prefix 64", "ipv4_prefix 24", "limit 1 1m"), respondKey))
	r := live.Get(t, "/", "X-Real-IP", "2001:db8:1:2::1")
	caddytesting.ExpectCode(t, r, 200, "first of the /64")
	if r.Body != "2001:db8:1:2::/64" {
		t.Errorf("key %q", r.Body)
	}
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Real-IP", "2001:db8:1:2:aaaa::7"), 429, "same /64")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Real-IP", "2001:db8:1:3::1"), 200, "other /64")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Real-IP", "192.0.2.1"), 200, "first of the /24")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Real-IP", "192.0.2.254"), 429, "same /24")
}

// A real IPv6 client, when the machine has ::1.
func TestIPv6Client(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln.Close()
	live.LoadSites(t, live.Site(caddytesting.Zone("it_v6client", "key {remote_host}", "ipv6_prefix 64", "limit 1 1m"),
		"bind ::1\n"+respondKey))
	client := &http.Client{Timeout: 10 * time.Second} // the tester's client dials 127.0.0.1 only
	do := func() caddytesting.Response {
		req, err := http.NewRequest("GET", fmt.Sprintf("http://[::1]:%d/", live.HTTPPort), nil)
		if err != nil {
			t.Fatal(err)
		}
		r := caddytesting.Send(client, req)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	r := do()
	caddytesting.ExpectCode(t, r, 200, "first")
	if r.Body != "::/64" {
		t.Errorf("key %q, want ::/64", r.Body)
	}
	caddytesting.ExpectCode(t, do(), 429, "second")
}

func TestWaitMode(t *testing.T) {
	live.LoadSites(t, live.Site(
		caddytesting.Zone("it_wait", "key {http.request.header.X-Wait}", "empty_key allow", "limit 1 2s", "on_limit wait 1m")+
			caddytesting.Zone("it_wait_long", caddytesting.ClientKey, "limit 1 1h", "on_limit wait 1s", caddytesting.MatchPath("/long")),
		`respond "{time.now.unix_ms}"`))
	// The server's clock tells when each request was answered: the second
	// cannot pass before the first's unit leaves the 2s window.
	r1 := live.Get(t, "/", "X-Wait", "a")
	caddytesting.ExpectCode(t, r1, 200, "first")
	r2 := live.Get(t, "/", "X-Wait", "a")
	caddytesting.ExpectCode(t, r2, 200, "second, after waiting")
	t1, err1 := strconv.ParseInt(r1.Body, 10, 64)
	t2, err2 := strconv.ParseInt(r2.Body, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("bodies %q %q", r1.Body, r2.Body)
	}
	if t2-t1 < 1000 {
		t.Errorf("second request answered %dms after the first: it did not wait", t2-t1)
	}

	// A wait longer than max_wait is refused (at once).
	r := live.ExpectCodes(t, "/long", []string{"X-Client", "b"}, 200, 429)
	caddytesting.ExpectRetryAfter(t, r, 3500, 3600)
}

func TestConcurrency(t *testing.T) {
	var mu sync.Mutex
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			mu.Lock()
			ch := release
			mu.Unlock()
			<-ch
		}
		io.WriteString(w, "upstream")
	}))
	defer upstream.Close()

	live.LoadSites(t, live.Site(caddytesting.Zone("it_conc", "algorithm concurrency", caddytesting.ClientKey, "limit 1 1m"),
		"reverse_proxy "+upstream.Listener.Addr().String()))
	done := make(chan caddytesting.Response, 1)
	go func() { done <- live.Do("/slow", "X-Client", "a") }()
	<-arrived // the first request holds the lease, in the upstream
	r := live.Get(t, "/fast", "X-Client", "a")
	caddytesting.ExpectCode(t, r, 429, "second in flight")
	if got := r.Header.Get("RateLimit-Policy"); got != `"it_conc";q=1;qu="concurrent-requests";w=60` {
		t.Errorf("policy %q", got)
	}
	caddytesting.ExpectCode(t, live.Get(t, "/fast", "X-Client", "b"), 200, "another client")
	close(release)
	if r := <-done; r.Code != 200 || r.Body != "upstream" {
		t.Fatalf("slow request: %d %q %v", r.Code, r.Body, r.Err)
	}
	// Released when the request ended: the client may see the end of the
	// response a moment before the handler returns, so allow a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := live.Get(t, "/fast", "X-Client", "a")
		if r.Code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease not released: %d", r.Code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	caddytesting.ExpectCode(t, live.Get(t, "/fast", "X-Client", "a"), 200, "and again")
}

// In one server, a site with handle_errors renders its 429s; a site without
// gets the handler's own empty 429.
func TestHandleErrorsOneSiteOfTwo(t *testing.T) {
	live.LoadSites(t, limitedSites(caddytesting.Zone("it_errsites", caddytesting.ClientKey, "limit 1 1h"), `respond "a"
	handle_errors {
		respond "a says {err.status_code}"
	}`, `respond "b"`))
	// The sites share the zone: a client of each.
	for _, host := range []string{"a.test", "b.test"} {
		r := live.ExpectCodes(t, "/", []string{"Host", host, "X-Client", host}, 200, 429)
		caddytesting.ExpectRetryAfter(t, r, 3500, 3600)
		want := ""
		if host == "a.test" {
			want = "a says 429"
		}
		if r.Body != want {
			t.Errorf("%s: body %q, want %q", host, r.Body, want)
		}
	}
}

// Every algorithm limits through a real Caddy.
func TestAlgorithms(t *testing.T) {
	// (concurrency: TestConcurrency)
	algs := []string{"sliding_log", "sliding_window", "fixed_window", "token_bucket", "leaky_bucket", "gcra"}
	var zones string
	for _, a := range algs {
		zones += caddytesting.Zone("it_alg_"+a, caddytesting.MatchPath("/"+a), "algorithm "+a, caddytesting.ClientKey, "limit 2 1h")
	}
	live.LoadSites(t, live.Site(zones, respondOK))
	for _, a := range algs {
		r := live.ExpectCodes(t, "/"+a, clientA(), 200, 200, 429)
		caddytesting.ExpectRetryAfter(t, r, 1, 2*3600)
		if !strings.HasPrefix(r.Header.Get("RateLimit"), `"it_alg_`+a+`";r=0;t=`) {
			t.Errorf("%s: RateLimit %q", a, r.Header.Get("RateLimit"))
		}
	}
}

// TestLimitsFromPlan: a map sets each customer's limit from their plan;
// an upgrade keeps what was used and gives the difference; a client's own
// header cannot go beyond the ceiling.
func TestLimitsFromPlan(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_plan", caddytesting.ClientKey,
		"limit {plan_limit} 1h default 2 max 4"), `map {http.request.header.X-Plan} {plan_limit} {
		pro     4
		abuse   1000
		default 2
	}
	respond "ok"`))
	free, pro, abuse := append(clientA(), "X-Plan", "free"), append(clientA(), "X-Plan", "pro"), append(clientA(), "X-Plan", "abuse")
	r := live.ExpectCodes(t, "/", free, 200, 200, 429)
	caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"it_plan";q=2;w=3600`)
	r = live.ExpectCodes(t, "/", pro, 200, 200, 429) // 2 used of 4
	caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", "4")
	r = live.ExpectCodes(t, "/", abuse, 429) // 1000 asked, 4 at most
	caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"it_plan";q=4;w=3600`)
}
