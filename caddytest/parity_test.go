package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
)

func init() {
	caddy.RegisterModule(eventSink{})
}

// eventSink is an events handler that posts each event it gets to URL, as
// JSON: its name, origin module and data (every value with its Go type).
type eventSink struct {
	URL string `json:"url"`
}

func (eventSink) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "events.handlers.rate_limit_test_sink",
		New: func() caddy.Module { return new(eventSink) },
	}
}

// sunkEvent is what eventSink posts.
type sunkEvent struct {
	Name   string
	Origin string
	Data   map[string][2]string // value, Go type
}

func (s *eventSink) Handle(ctx context.Context, e caddy.Event) error {
	ev := sunkEvent{Name: e.Name(), Data: make(map[string][2]string)}
	if o := e.Origin(); o != nil {
		ev.Origin = string(o.CaddyModule().ID)
	}
	for k, v := range e.Data {
		ev.Data[k] = [2]string{fmt.Sprint(v), fmt.Sprintf("%T", v)}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", s.URL, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// loadJSON (re)configures the shared Caddy with a JSON config: one HTTP
// server on the package's HTTP port with routes (a JSON array's elements) and the
// other apps (JSON object members, "" for none). As Caddy.Load, it adds the
// marker.test route and waits until the new config serves every new
// connection.
func loadJSON(t *testing.T, routes, apps string) {
	t.Helper()
	marker := live.Marker()
	if apps != "" {
		apps = "," + apps
	}
	config := fmt.Sprintf(`{
	"admin": {"listen": "localhost:%d"},
	"apps": {
		"http": {
			"http_port": %d,
			"https_port": %d,
			"grace_period": 1,
			"servers": {
				"parity": {
					"listen": ["127.0.0.1:%d"],
					"automatic_https": {"disable": true},
					"routes": [
						{"match": [{"host": ["marker.test"]}], "handle": [{"handler": "static_response", "body": %q}]},
						%s
					]
				}
			}
		}%s
	}
}`, live.AdminPort, live.HTTPPort, live.HTTPSPort, live.HTTPPort, marker, routes, apps)
	live.LoadMarked(t, config, "json", marker)
}

// A zone name is one limit in the whole config: two sites that name it
// share its count (memory store), before and after a reload.
func TestZoneSharedBySites(t *testing.T) {
	cfg := func(body string) string {
		return limitedSites(caddytesting.Zone("it_parity_shared", caddytesting.ClientKey, "limit 3 1h"),
			`respond "a`+body+`"`, `respond "b`+body+`"`)
	}
	live.LoadSites(t, cfg("1"))
	getHost := func(host string) caddytesting.Response {
		t.Helper()
		return live.Get(t, "/", "Host", host, "X-Client", "c")
	}
	caddytesting.ExpectCode(t, getHost("a.test"), 200, "a 1")
	r := getHost("b.test")
	caddytesting.ExpectCode(t, r, 200, "b 1")
	if r.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("b after a: remaining %q, want 1 (one count for both sites)", r.Header.Get("X-RateLimit-Remaining"))
	}

	// A reload with the zone unchanged: the shared count goes on.
	live.LoadSites(t, cfg("2"))
	r = getHost("a.test")
	caddytesting.ExpectCode(t, r, 200, "a 2 after the reload")
	if r.Body != "a2" || r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("a after the reload: body %q remaining %q, want a2 and 0", r.Body, r.Header.Get("X-RateLimit-Remaining"))
	}
	caddytesting.ExpectCode(t, getHost("b.test"), 429, "b after the zone's 3 requests")
	caddytesting.ExpectCode(t, getHost("a.test"), 429, "a after the zone's 3 requests")
}

// Two zones of one name with different limit settings fail to load, the
// error naming both places; the running config stays.
func TestZoneConflictFailsToLoad(t *testing.T) {
	live.LoadSites(t, `
http://a.test {
	respond "running"
}`)
	site := func(host string, events int) string {
		return live.HostSite(host, caddytesting.Zone("it_parity_conflict", caddytesting.ClientKey, fmt.Sprintf("limit %d 1h", events)),
			fmt.Sprintf("respond %q", host[:1]))
	}
	msg := live.LoadError(t, live.Globals("")+site("a.test", 3)+site("b.test", 4))
	for _, want := range []string{`zone \"it_parity_conflict\": defined differently in rate_limit handler #`,
		`site host [\"a.test\"]`, `site host [\"b.test\"]`, "differ in limits"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %s does not say %s", msg, want)
		}
	}
	if r := live.Get(t, "/", "Host", "a.test"); r.Body != "running" {
		t.Fatalf("the running config was replaced: %q", r.Body)
	}
}

// A handler in mholt/caddy-ratelimit's JSON shape (its README's example)
// loads and limits.
func TestMholtJSONConfig(t *testing.T) {
	loadJSON(t, `{
	"handle": [
		{
			"handler": "rate_limit",
			"rate_limits": {
				"it_parity_static": {
					"match": [{"method": ["GET"]}],
					"key": "static",
					"window": "1m",
					"max_events": 3
				},
				"it_parity_dynamic": {
					"key": "{http.request.header.X-Client}",
					"window": "1h",
					"max_events": 2
				}
			},
			"jitter": 0.2,
			"sweep_interval": "1m",
			"log_key": true
		},
		{"handler": "static_response", "body": "I'm behind the rate limiter!"}
	]
}`, "")
	r := live.Get(t, "/", "X-Client", "a")
	caddytesting.ExpectCode(t, r, 200, "1st")
	if r.Body != "I'm behind the rate limiter!" {
		t.Fatalf("body %q", r.Body)
	}
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "a"), 200, "2nd")
	r = live.Get(t, "/", "X-Client", "a")
	caddytesting.ExpectCode(t, r, 429, "3rd of one client (it_parity_dynamic: 2 per hour)")
	caddytesting.ExpectRetryAfter(t, r, 1, 3600*12/10+1)
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "b"), 200, "another client")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "c"), 429, "4th GET (it_parity_static: 3 per minute)")

	// Its distributed mode is refused, with the Caddyfile's message.
	caddytest.AssertLoadError(t, fmt.Sprintf(`{
	"admin": {"listen": "localhost:%d"},
	"apps": {"http": {"servers": {"parity": {"listen": ["127.0.0.1:%d"], "routes": [{"handle": [{
		"handler": "rate_limit",
		"rate_limits": {"it_parity_distributed": {"key": "static", "window": "1m", "max_events": 1}},
		"distributed": {"read_interval": "5s", "write_interval": "5s"}
	}]}]}}}}
}`, live.AdminPort, live.HTTPPort), "json", "distributed (from mholt/caddy-ratelimit) is not supported: use store redis")
}

// Each rejection emits rate_limit_exceeded, with mholt/caddy-ratelimit's
// payload, to a subscriber of the events app.
func TestEventExceeded(t *testing.T) {
	got := make(chan sunkEvent, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e sunkEvent
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			t.Errorf("sink: %v", err)
		}
		got <- e
	}))
	defer sink.Close()

	loadJSON(t, `{
	"handle": [
		{
			"handler": "rate_limit",
			"zones": [{"name": "it_parity_event", "key": "{http.request.header.X-Client}", "limits": [{"events": 1, "window": "1h"}]}]
		},
		{"handler": "static_response", "body": "ok"}
	]
}`, fmt.Sprintf(`"events": {
	"subscriptions": [{
		"events": ["rate_limit_exceeded"],
		"modules": ["http.handlers.rate_limit"],
		"handlers": [{"handler": "rate_limit_test_sink", "url": %q}]
	}]
}`, sink.URL))

	r := live.ExpectCodes(t, "/", clientA(), 200, 429)
	// The event is emitted (and the sink answered) before the response
	// is written.
	var e sunkEvent
	select {
	case e = <-got:
	default:
		t.Fatal("no event for the rejection")
	}
	want := sunkEvent{
		Name:   "rate_limit_exceeded",
		Origin: "http.handlers.rate_limit",
		Data: map[string][2]string{
			"zone":      {"it_parity_event", "string"},
			"wait":      {(time.Duration(caddytesting.RetryAfter(t, r)) * time.Second).String(), "time.Duration"},
			"remote_ip": {"127.0.0.1", "string"},
		},
	}
	if fmt.Sprint(e) != fmt.Sprint(want) {
		t.Fatalf("event %+v, want %+v", e, want)
	}
	if len(got) != 0 {
		t.Fatalf("%d more events, want 1 in all (none for the admission)", len(got))
	}
}

// An error page written for mholt/caddy-ratelimit renders the same: its
// rejection reaches handle_errors as caddyhttp.Error(429, nil), whose
// {err.message} is the status text.
func TestMholtErrorPage(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("it_parity_errpage", "key {http.request.header.X-Client}", "events 1", "window 1h"), `respond "ok"
	handle_errors {
		respond "{err.status_code} {err.status_text}: {err.message} ({http.rate_limit.exceeded.name})"
	}`))
	r := live.ExpectCodes(t, "/", clientA(), 200, 429)
	if want := "429 Too Many Requests: Too Many Requests (it_parity_errpage)"; r.Body != want {
		t.Fatalf("error page %q, want %q", r.Body, want)
	}
}

// mholtRequest sends method to path with the header pairs hdr (see
// caddytesting.Caddy.Request).
func mholtRequest(t *testing.T, method, path string, hdr ...string) caddytesting.Response {
	t.Helper()
	req := live.Request(path, hdr...)
	req.Method = method
	r := caddytesting.Send(caddytesting.NoKeepAlive, req)
	if r.Err != nil {
		t.Fatalf("%s %s: %v", method, path, r.Err)
	}
	return r
}

// mholt/caddy-ratelimit's own Caddyfile test: its global options (order
// before basicauth, the directive's old name), a zone of ten GETs per
// minute for everyone; the eleventh waits about the window, and other
// methods pass.
func TestMholtCaddyfile(t *testing.T) {
	live.Load(t, live.Globals("\tskip_install_trust\n\torder rate_limit before basicauth")+
		live.Site(caddytesting.Zone("it_parity_mholt_caddyfile", "match {\n\t\t\t\tmethod GET\n\t\t\t}", "key static", "window 60s", "events 10"),
			"respond 200"))
	for i := 0; i < 10; i++ {
		caddytesting.ExpectCode(t, live.Get(t, "/"), 200, fmt.Sprintf("GET %d", i+1))
	}
	r := live.Get(t, "/")
	caddytesting.ExpectCode(t, r, 429, "11th GET")
	caddytesting.ExpectRetryAfter(t, r, 1, 60)
	// Its tests expect the empty body of a 429 without error routes.
	if r.Body != "" {
		t.Errorf("429 body %q, want none", r.Body)
	}
	caddytesting.ExpectCode(t, mholtRequest(t, "POST", "/"), 200, "POST (not matched)")
}

// mholt/caddy-ratelimit's zones and keys test: zones told apart by their
// matchers, keys by {http.request.orig_uri.path}; each pair counts alone.
func TestMholtZonesAndKeysApart(t *testing.T) {
	zone := func(method string) string {
		return fmt.Sprintf(`"it_parity_mholt_%s": {"match": [{"method": [%q]}], "key": "{http.request.orig_uri.path}", "window": "1h", "max_events": 3}`,
			strings.ToLower(method), method)
	}
	loadJSON(t, `{"handle": [
		{"handler": "rate_limit", "rate_limits": {`+zone("GET")+`, `+zone("DELETE")+`}},
		{"handler": "static_response", "status_code": 200}
	]}`, "")
	for _, method := range []string{"GET", "DELETE"} {
		for _, p := range []string{"/path1", "/path2"} {
			for i := 0; i < 3; i++ {
				caddytesting.ExpectCode(t, mholtRequest(t, method, p), 200, fmt.Sprintf("%s %s %d", method, p, i+1))
			}
			r := mholtRequest(t, method, p)
			caddytesting.ExpectCode(t, r, 429, fmt.Sprintf("%s %s 4th", method, p))
			caddytesting.ExpectRetryAfter(t, r, 1, 3600)
		}
	}
}

// mholt/caddy-ratelimit's concurrency test: max_concurrent 1 per client; a
// second request of the client while the first is in flight is refused,
// another client's passes, and the slot is free once the first ends.
func TestMholtMaxConcurrent(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "up")
	}))
	defer upstream.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	live.LoadSites(t, live.Site(caddytesting.Zone("it_parity_mholt_concurrent", caddytesting.ClientKey, "max_concurrent 1"),
		"reverse_proxy "+strings.TrimPrefix(upstream.URL, "http://")))

	done := make(chan caddytesting.Response, 1)
	go func() { done <- live.Do("/slow", clientA()...) }()
	select {
	case <-entered:
	case r := <-done:
		t.Fatalf("the slow request ended before the upstream: %d %v", r.Code, r.Err)
	}
	r := live.Get(t, "/", clientA()...)
	caddytesting.ExpectCode(t, r, 429, "a second request of the client in flight")
	caddytesting.ExpectHeader(t, r, "Retry-After", "1")
	caddytesting.ExpectCode(t, live.Get(t, "/", "X-Client", "b"), 200, "another client")
	close(release)
	caddytesting.ExpectCode(t, <-done, 200, "the slow request")
	// The slot is given back when the handler returns, which the client
	// may see after the response's last byte.
	if !caddytesting.WaitFor(10*time.Second, func() bool { return live.Do("/", clientA()...).Code == 200 }) {
		t.Fatal("the client's slot was not given back")
	}
}

// A reload that turns a window zone into a max_concurrent zone of the same
// name (mholt/caddy-ratelimit's reload test) serves the new zone.
func TestMholtZoneBecomesConcurrency(t *testing.T) {
	const name = "it_parity_mholt_switch"
	live.LoadSites(t, live.Site(caddytesting.Zone(name, caddytesting.ClientKey, "events 1", "window 1h"), respondOK))
	live.ExpectCodes(t, "/", clientA(), 200, 429)
	live.LoadSites(t, live.Site(caddytesting.Zone(name, caddytesting.ClientKey, "max_concurrent 1"), respondOK))
	live.ExpectCodes(t, "/", clientA(), 200, 200, 200)
}

// mholt/caddy-ratelimit's metrics test, with this module's names (see the
// README's migration section): requests by zone and result, and the keys a
// zone holds.
func TestMholtMetrics(t *testing.T) {
	const zone = "it_parity_mholt_metrics"
	loadJSON(t, `{"handle": [
		{"handler": "rate_limit", "rate_limits": {"`+zone+`": {"match": [{"method": ["GET"]}], "key": "static", "window": "1h", "max_events": 2}}},
		{"handler": "static_response", "status_code": 200}
	]}`, "")
	// The counters keep counting across reloads (and test runs, with
	// -count): this config's requests are what they gain.
	before := live.Scrape(t)
	live.ExpectCodes(t, "/", nil, 200, 200, 429)
	fams := live.Scrape(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		gauge  bool
	}{
		{"caddy_http_rate_limit_requests_total", []string{"zone", zone, "result", "allowed"}, 2, false},
		{"caddy_http_rate_limit_requests_total", []string{"zone", zone, "result", "denied"}, 1, false},
		{"caddy_http_rate_limit_keys", []string{"zone", zone}, 1, true},
	} {
		got := caddytesting.Value(fams, c.name, c.labels...)
		if !c.gauge {
			got -= max(0, caddytesting.Value(before, c.name, c.labels...)) // -1: none yet
		}
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// RussellLuo/caddy-ext's one-line form, its README's example: two requests
// a minute per id; another id and a request without one pass. A second
// such handler counts on its own, and a reload of the same Caddyfile keeps
// the counts.
func TestCaddyExtOneLine(t *testing.T) {
	id := strconv.FormatInt(time.Now().UnixNano(), 10) // new keys in each run
	caddyfile := live.Globals("") + fmt.Sprintf(`
http://:%d {
	route /foo {
		rate_limit {query.id} 2r/m
		respond 200
	}
	route /bar {
		rate_limit {query.id} 1r/m 100 503
		respond 200
	}
}
`, live.HTTPPort)
	live.Load(t, caddyfile)
	live.ExpectCodes(t, "/foo?id="+id, nil, 200, 200, 429)
	caddytesting.ExpectRetryAfter(t, live.Get(t, "/foo?id="+id), 1, 120)
	live.ExpectCodes(t, "/foo?id=other"+id, nil, 200)
	live.ExpectCodes(t, "/foo", nil, 200, 200, 200)
	live.ExpectCodes(t, "/bar?id="+id, nil, 200, 503)

	live.Load(t, caddyfile)
	live.ExpectCodes(t, "/foo?id="+id, nil, 429)
	live.ExpectCodes(t, "/bar?id="+id, nil, 503)
}

// caddy-ext's one-line form in a named route and in a site of one
// Caddyfile: each counts on its own (the two would fail to load were they
// one zone name with two definitions).
func TestCaddyExtNamedRoute(t *testing.T) {
	id := strconv.FormatInt(time.Now().UnixNano(), 10)
	live.Load(t, live.Globals("")+fmt.Sprintf(`
&(limited) {
	rate_limit {query.id} 2r/m
	respond "named"
}

http://:%d {
	rate_limit /a {query.id} 1r/m
	invoke /b limited
	respond ok
}
`, live.HTTPPort))
	live.ExpectCodes(t, "/a?id="+id, nil, 200, 429)
	live.ExpectCodes(t, "/b?id="+id, nil, 200, 200, 429)
}
