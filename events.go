package ratelimit

import (
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
)

// eventExceeded is the Caddy event emitted on each rejection, with the
// data mholt/caddy-ratelimit gives it: "zone" (string), "wait"
// (time.Duration: the Retry-After sent) and "remote_ip" (string: the
// address of the connection's peer).
const eventExceeded = "rate_limit_exceeded"

// provisionEvents keeps the config's events app when something listens to
// eventExceeded, so that a rejection nobody listens to builds no event. It
// looks at the subscriptions of the events app's config and, through
// ShouldEmit, at those made so far by other modules (events.App.On) and at
// the app's debug logging (which logs every event). A subscription made by
// a module provisioned after this handler is not seen.
func (h *Handler) provisionEvents(ctx caddy.Context) error {
	v, err := ctx.AppIfConfigured("events")
	if errors.Is(err, caddy.ErrNotConfigured) {
		return nil // no events app: nobody can subscribe
	}
	if err != nil {
		return err
	}
	app, ok := v.(*caddyevents.App)
	if !ok || !listens(app, eventExceeded, string(h.CaddyModule().ID)) {
		return nil
	}
	h.rt.events = app
	h.rt.eventCtx = ctx
	return nil
}

// listens reports whether app would hand the event name emitted by the
// module origin to a subscriber (or log it): a subscription to that event
// or to all events, from that module, one of its parent namespaces (as
// "http.handlers") or any module.
func listens(app *caddyevents.App, name, origin string) bool {
	if app.ShouldEmit(name) {
		return true
	}
	for _, s := range app.Subscriptions {
		if s == nil || (len(s.Events) > 0 && !slices.Contains(s.Events, name) && !slices.Contains(s.Events, "")) {
			continue
		}
		if len(s.Modules) == 0 {
			return true
		}
		for _, m := range s.Modules {
			if m == "" || string(m) == origin || strings.HasPrefix(origin, string(m)+".") {
				return true
			}
		}
	}
	return false
}

// emitExceeded emits eventExceeded for a rejection by zone z with a
// Retry-After of retry seconds. Subscribers run synchronously, before the
// response is written.
func (h *Handler) emitExceeded(r *http.Request, z *zone, retry int64) {
	remoteIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		remoteIP = r.RemoteAddr // no port
	}
	h.rt.events.Emit(h.rt.eventCtx, eventExceeded, map[string]any{
		"zone":      z.name,
		"wait":      time.Duration(retry) * time.Second,
		"remote_ip": remoteIP,
	})
}
