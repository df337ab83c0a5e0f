package ratelimit

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
)

func init() {
	caddy.RegisterModule(new(eventRecorder))
}

// eventRecorder is an events handler module that keeps the events it gets
// (none, with discard).
type eventRecorder struct {
	Discard bool `json:"discard,omitempty"`

	mu     sync.Mutex
	events []caddy.Event
}

func (*eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "events.handlers.rate_limit_test_recorder",
		New: func() caddy.Module { return new(eventRecorder) },
	}
}

func (r *eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	if r.Discard {
		return nil
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	return nil
}

func (r *eventRecorder) recorded() []caddy.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]caddy.Event(nil), r.events...)
}

// eventsContext provisions a config whose apps are apps (JSON, e.g.
// `{"events":{...}}`; "" for none), as Caddy does before it provisions the
// http app, and returns its context and its events app (nil without one).
// Its logs are at the default level (info), as in production: the events
// app hands an event to nobody (ShouldEmit) only when it does not log it at
// debug level.
func eventsContext(t testing.TB, apps string) (caddy.Context, *caddyevents.App) {
	t.Helper()
	cfg := new(caddy.Config)
	if apps != "" {
		if err := json.Unmarshal([]byte(apps), &cfg.AppsRaw); err != nil {
			t.Fatal(err)
		}
	}
	ctx, err := caddy.ProvisionContext(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.AppsRaw["events"]; !ok {
		return ctx, nil
	}
	app, err := ctx.App("events")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, app.(*caddyevents.App)
}

// loadHandler loads the handler config in ctx as Caddy does (the module
// being provisioned is then the context's current module, the origin of
// its events).
func loadHandler(t testing.TB, ctx caddy.Context, config string) *Handler {
	t.Helper()
	v, err := ctx.LoadModuleByID("http.handlers.rate_limit", json.RawMessage(config))
	if err != nil {
		t.Fatal(err)
	}
	return v.(*Handler)
}

// subscription is an events app config with one subscription of a
// recorder to events from modules ("" for none: any).
func subscription(events, modules string) string {
	sub := `"handlers":[{"handler":"rate_limit_test_recorder"}]`
	if events != "" {
		sub += `,"events":` + events
	}
	if modules != "" {
		sub += `,"modules":` + modules
	}
	return `{"events":{"subscriptions":[{` + sub + `}]}}`
}

func TestListens(t *testing.T) {
	for _, c := range []struct {
		name, apps string
		want       bool
	}{
		{"no events app", "", false},
		{"no subscription", `{"events":{}}`, false},
		{"this event", subscription(`["tls_get_certificate","rate_limit_exceeded"]`, ""), true},
		{"other events", subscription(`["tls_get_certificate"]`, ""), false},
		{"all events", subscription("", ""), true},
		{"this module", subscription(`["rate_limit_exceeded"]`, `["http.handlers.rate_limit"]`), true},
		{"parent namespace", subscription("", `["http.handlers"]`), true},
		{"other module", subscription(`["rate_limit_exceeded"]`, `["http.handlers.rate"]`), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, _ := eventsContext(t, c.apps)
			h := loadHandler(t, ctx, `{"zones":[{"name":"ev","key":"k","limits":[{"events":1,"window":"1m"}]}]}`)
			defer h.Cleanup()
			if got := h.rt.events != nil; got != c.want {
				t.Fatalf("events set up: %v, want %v", got, c.want)
			}
		})
	}
	// A subscription made by another module (events.App.On) before the
	// handler's Provision.
	_, app := eventsContext(t, `{"events":{}}`)
	if listens(app, eventExceeded, "http.handlers.rate_limit") {
		t.Fatal("setup: listens without a subscription")
	}
	if err := app.On(eventExceeded, new(eventRecorder)); err != nil {
		t.Fatal(err)
	}
	if !listens(app, eventExceeded, "http.handlers.rate_limit") {
		t.Fatal("a subscription made with On is not seen")
	}
}

// Each rejection (not an admission, not a dry-run denial) emits
// rate_limit_exceeded from this module, with the payload of
// mholt/caddy-ratelimit.
func TestEmitExceeded(t *testing.T) {
	ctx, app := eventsContext(t, subscription(`["rate_limit_exceeded"]`, `["http.handlers.rate_limit"]`))
	rec := app.Subscriptions[0].Handlers[0].(*eventRecorder)
	provisionEvents := func(config string) *Handler {
		h := loadHandler(t, ctx, config)
		t.Cleanup(func() { h.Cleanup() })
		return h
	}
	h := provisionEvents(`{"zones":[{"name":"ev","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]}]}`)
	dry := provisionEvents(`{"dry_run":true,"zones":[{"name":"ev_dry","key":"{http.request.remote.host}","limits":[{"events":1,"window":"1m"}]}]}`)
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}

	serve(h, newReq("192.0.2.1:1234"))
	serve(dry, newReq("192.0.2.1:1234"))
	serve(dry, newReq("192.0.2.1:1234"))
	if n := len(rec.recorded()); n != 0 {
		t.Fatalf("%d events for an admission and a dry-run denial", n)
	}
	for range 2 {
		if res := serve(h, newReq("192.0.2.1:1234")); res.code != 429 {
			t.Fatalf("code %d", res.code)
		}
	}
	events := rec.recorded()
	if len(events) != 2 {
		t.Fatalf("%d events for 2 rejections", len(events))
	}
	e := events[1]
	if e.Name() != eventExceeded || e.Origin() == nil || e.Origin().CaddyModule().ID != "http.handlers.rate_limit" {
		t.Fatalf("event %q from %v", e.Name(), e.Origin())
	}
	want := map[string]any{"zone": "ev", "remote_ip": "192.0.2.1", "wait": 60 * time.Second}
	if len(e.Data) != len(want) {
		t.Fatalf("event data %#v, want %#v", e.Data, want)
	}
	for k, v := range want {
		if e.Data[k] != v {
			t.Fatalf("event data %#v, want %#v", e.Data, want)
		}
	}
}

// BenchmarkServeHTTPDeniedEvents is the denial path of
// BenchmarkServeHTTPDenied in a config with an events app: nobody
// subscribed (no event is built), or a subscriber to rate_limit_exceeded
// that does nothing (the cost of building and emitting the event).
func BenchmarkServeHTTPDeniedEvents(b *testing.B) {
	for _, c := range []struct{ name, apps string }{
		{"no_subscriber", `{"events":{}}`},
		{"subscriber", `{"events":{"subscriptions":[{"events":["rate_limit_exceeded"],"handlers":[{"handler":"rate_limit_test_recorder","discard":true}]}]}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx, app := eventsContext(b, c.apps)
			h := loadHandler(b, ctx, `{"zones":[{"name":"bench","key":"{http.request.remote.host}","algorithm":"gcra",
				"limits":[{"events":1,"window":"1h"}]}]}`)
			defer h.Cleanup()
			if err := app.Start(); err != nil {
				b.Fatal(err)
			}
			benchRequests(b, func(w http.ResponseWriter, r *http.Request) error {
				return h.ServeHTTP(w, r, nopHandler{})
			})
		})
	}
}
