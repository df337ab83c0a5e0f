package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
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
// other apps (JSON object members, "" for none). As load, it adds the
// marker.test route and waits until the new config serves every new
// connection.
func loadJSON(t *testing.T, routes, apps string) *caddytest.Tester {
	t.Helper()
	marker := "load-" + strconv.FormatInt(loads.Add(1), 10)
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
	tc := caddytest.NewTester(t)
	tc.InitServer(config, "json")
	if t.Failed() {
		t.FailNow()
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for seen := 0; seen < 10; {
		if time.Now().After(deadline) {
			t.Fatalf("the config just loaded (%s) never served 10 connections in a row", marker)
		}
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Host = "marker.test"
		seen++
		res, err := client.Do(req)
		if err != nil {
			seen = 0
			time.Sleep(10 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != marker {
			seen = 0
			time.Sleep(10 * time.Millisecond)
		}
	}
	return tc
}

// loadError posts a config that must not load (a Caddyfile, globals
// added) and returns the error Caddy answers.
func loadError(t *testing.T, sites string) string {
	t.Helper()
	res, err := http.Post("http://localhost:2999/load", "text/caddyfile", strings.NewReader(globals+sites))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode == 200 {
		t.Fatal("the config loaded")
	}
	return string(body)
}

// A zone name is one limit in the whole config: two sites that name it
// share its count (memory store), before and after a reload.
func TestZoneSharedBySites(t *testing.T) {
	cfg := func(body string) string {
		return `
(limited) {
	rate_limit {
		zone it_parity_shared {
			key {http.request.header.X-Client}
			limit 3 1h
		}
	}
}
http://a.test:9080 {
	import limited
	respond "a` + body + `"
}
http://b.test:9080 {
	import limited
	respond "b` + body + `"
}`
	}
	tc := load(t, cfg("1"))
	getHost := func(host string) response {
		t.Helper()
		return get(t, tc, "/", "Host", host, "X-Client", "c")
	}
	expectCode(t, getHost("a.test"), 200, "a 1")
	r := getHost("b.test")
	expectCode(t, r, 200, "b 1")
	if r.hdr.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("b after a: remaining %q, want 1 (one count for both sites)", r.hdr.Get("X-RateLimit-Remaining"))
	}

	// A reload with the zone unchanged: the shared count goes on.
	tc = load(t, cfg("2"))
	r = getHost("a.test")
	expectCode(t, r, 200, "a 2 after the reload")
	if r.body != "a2" || r.hdr.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("a after the reload: body %q remaining %q, want a2 and 0", r.body, r.hdr.Get("X-RateLimit-Remaining"))
	}
	expectCode(t, getHost("b.test"), 429, "b after the zone's 3 requests")
	expectCode(t, getHost("a.test"), 429, "a after the zone's 3 requests")
}

// Two zones of one name with different limit settings fail to load, the
// error naming both places; the running config stays.
func TestZoneConflictFailsToLoad(t *testing.T) {
	tc := load(t, `
http://a.test:9080 {
	respond "running"
}`)
	msg := loadError(t, `
http://a.test:9080 {
	rate_limit {
		zone it_parity_conflict {
			key {http.request.header.X-Client}
			limit 3 1h
		}
	}
	respond "a"
}
http://b.test:9080 {
	rate_limit {
		zone it_parity_conflict {
			key {http.request.header.X-Client}
			limit 4 1h
		}
	}
	respond "b"
}`)
	for _, want := range []string{`zone \"it_parity_conflict\": defined differently in rate_limit handler #`,
		`site host [\"a.test\"]`, `site host [\"b.test\"]`, "differ in limits"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %s does not say %s", msg, want)
		}
	}
	if r := get(t, tc, "/", "Host", "a.test"); r.body != "running" {
		t.Fatalf("the running config was replaced: %q", r.body)
	}
}

// A handler in mholt/caddy-ratelimit's JSON shape (its README's example)
// loads and limits.
func TestMholtJSONConfig(t *testing.T) {
	tc := loadJSON(t, `{
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
	r := get(t, tc, "/", "X-Client", "a")
	expectCode(t, r, 200, "1st")
	if r.body != "I'm behind the rate limiter!" {
		t.Fatalf("body %q", r.body)
	}
	expectCode(t, get(t, tc, "/", "X-Client", "a"), 200, "2nd")
	r = get(t, tc, "/", "X-Client", "a")
	expectCode(t, r, 429, "3rd of one client (it_parity_dynamic: 2 per hour)")
	expectRetryAfter(t, r, 1, 3600*12/10+1)
	expectCode(t, get(t, tc, "/", "X-Client", "b"), 200, "another client")
	expectCode(t, get(t, tc, "/", "X-Client", "c"), 429, "4th GET (it_parity_static: 3 per minute)")

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

	tc := loadJSON(t, `{
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

	expectCode(t, get(t, tc, "/", "X-Client", "a"), 200, "1st")
	r := get(t, tc, "/", "X-Client", "a")
	expectCode(t, r, 429, "2nd")
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
			"wait":      {(time.Duration(mustAtoi(t, r.hdr.Get("Retry-After"))) * time.Second).String(), "time.Duration"},
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

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
