package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
// server on 127.0.0.1:9080 with routes (a JSON array's elements) and the
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
	"admin": {"listen": "localhost:2999"},
	"apps": {
		"http": {
			"http_port": 9080,
			"https_port": 9443,
			"grace_period": 1,
			"servers": {
				"parity": {
					"listen": ["127.0.0.1:9080"],
					"automatic_https": {"disable": true},
					"routes": [
						{"match": [{"host": ["marker.test"]}], "handle": [{"handler": "static_response", "body": %q}]},
						%s
					]
				}
			}
		}%s
	}
}`, marker, routes, apps)
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
http://a.test:9080 {
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
	caddytest.AssertLoadError(t, `{
	"admin": {"listen": "localhost:2999"},
	"apps": {"http": {"servers": {"parity": {"listen": ["127.0.0.1:9080"], "routes": [{"handle": [{
		"handler": "rate_limit",
		"rate_limits": {"it_parity_distributed": {"key": "static", "window": "1m", "max_events": 1}},
		"distributed": {"read_interval": "5s", "write_interval": "5s"}
	}]}]}}}}
}`, "json", "distributed (from mholt/caddy-ratelimit) is not supported: this module shares counts between instances with its own store (see store)")
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
