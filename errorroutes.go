package ratelimit

import (
	"encoding/json"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// errorRoutesMode says whether a rejection is returned as an error, for
// the site's handle_errors routes to render, or written by the handler.
type errorRoutesMode uint8

const (
	errorRoutesUnknown errorRoutesMode = iota
	errorRoutesYes
	errorRoutesNo
)

// errorRoutesFor tells, at provision time, whether an error returned by the
// handler reaches error routes: the errors routes of an enclosing subroute,
// or the server's handle_errors routes unless none of them can match this
// site's requests.
func errorRoutesFor(ctx caddy.Context) errorRoutesMode {
	for _, m := range ctx.Modules() {
		if sr, ok := m.(*caddyhttp.Subroute); ok && sr.Errors != nil && len(sr.Errors.Routes) > 0 {
			return errorRoutesYes
		}
	}
	srv, ok := ctx.Context.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return errorRoutesUnknown
	}
	if srv.Errors == nil || len(srv.Errors.Routes) == 0 {
		return errorRoutesNo
	}
	if errorRoutesMayMatch(srv) {
		return errorRoutesYes
	}
	return errorRoutesNo
}

// errorRoutesMayMatch reports whether one of the server's error routes may
// match a request of the site being provisioned. The Caddyfile gives a
// site's handle_errors routes the site's host matcher, so a site without
// handle_errors shares a server with sites that have some: their routes
// match other hosts, and a rejection here can be written directly, saving
// Caddy's error path. Anything but plain host lists on both sides (no
// wildcards, no placeholders) counts as a possible match.
func errorRoutesMayMatch(srv *caddyhttp.Server) bool {
	ours, ok := currentRouteHosts(srv.Routes)
	if !ok {
		return true
	}
	for i := range srv.Errors.Routes {
		theirs, ok := rawHosts(srv.Errors.Routes[i].MatcherSetsRaw)
		if !ok {
			return true
		}
		for _, h := range theirs {
			if _, dup := ours[strings.ToLower(h)]; dup {
				return true
			}
		}
	}
	return false
}

// currentRouteHosts returns the hosts of the top-level route being
// provisioned (see siteOf), when its matchers are host lists only.
func currentRouteHosts(routes caddyhttp.RouteList) (map[string]struct{}, bool) {
	for i := range routes {
		r := &routes[i]
		if r.Handlers != nil || len(r.HandlersRaw) == 0 {
			continue
		}
		if len(r.MatcherSets) == 0 {
			return nil, false
		}
		hosts := make(map[string]struct{})
		for _, set := range r.MatcherSets {
			if len(set) != 1 {
				return nil, false
			}
			mh, ok := set[0].(caddyhttp.MatchHost)
			if !ok {
				if p, isPtr := set[0].(*caddyhttp.MatchHost); isPtr && p != nil {
					mh, ok = *p, true
				}
			}
			if !ok || !plainHosts(mh) {
				return nil, false
			}
			for _, h := range mh {
				hosts[strings.ToLower(h)] = struct{}{}
			}
		}
		return hosts, true
	}
	return nil, false
}

// rawHosts returns the hosts of unprovisioned matcher sets that are host
// lists only.
func rawHosts(sets caddyhttp.RawMatcherSets) ([]string, bool) {
	if len(sets) == 0 {
		return nil, false // matches every request
	}
	var all []string
	for _, set := range sets {
		raw, ok := set["host"]
		if len(set) != 1 || !ok {
			return nil, false
		}
		var hosts []string
		if err := json.Unmarshal(raw, &hosts); err != nil || !plainHosts(hosts) {
			return nil, false
		}
		all = append(all, hosts...)
	}
	return all, true
}

// plainHosts reports whether hosts are literal names, matched only by
// themselves.
func plainHosts(hosts []string) bool {
	if len(hosts) == 0 {
		return false
	}
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, "*{}") {
			return false
		}
	}
	return true
}
