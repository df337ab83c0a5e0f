package ratelimit

import (
	"encoding/json"
	"fmt"
	"strconv"
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

// errorRoutesFor tells, at provision time, whether a rejection with status
// returned by the handler as an error reaches error routes: the errors
// routes of an enclosing subroute, or the server's handle_errors routes
// unless none of them can render this site's rejections.
func errorRoutesFor(ctx caddy.Context, status int) errorRoutesMode {
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
	if errorRoutesMayMatch(srv, status) {
		return errorRoutesYes
	}
	return errorRoutesNo
}

// errorRoutesMayMatch reports whether one of the server's error routes may
// render a rejection with status of the site being provisioned. The
// Caddyfile gives a site's handle_errors routes the site's host matcher, so
// a site without handle_errors shares a server with sites that have some:
// their routes match other hosts, and a rejection here can be written
// directly, saving Caddy's error path. Likewise a site whose handle_errors
// all name other statuses (handle_errors 404) cannot render it. What is not
// host lists (wildcards matched label by label as Caddy does) and the
// status expressions the Caddyfile writes counts as a possible match.
func errorRoutesMayMatch(srv *caddyhttp.Server, status int) bool {
	ours, ok := currentRouteHosts(srv.Routes)
	for i := range srv.Errors.Routes {
		r := &srv.Errors.Routes[i]
		if theirs, plain := rawHosts(r.MatcherSetsRaw); ok && plain && !hostsMeet(ours, theirs) {
			continue
		}
		if mayRenderStatus(r.HandlersRaw, status) {
			return true
		}
	}
	return false
}

// currentRouteHosts returns the hosts of the top-level route being
// provisioned (see siteOf), when its matchers are host lists only.
func currentRouteHosts(routes caddyhttp.RouteList) ([]string, bool) {
	for i := range routes {
		r := &routes[i]
		if r.Handlers != nil || len(r.HandlersRaw) == 0 {
			continue
		}
		if len(r.MatcherSets) == 0 {
			return nil, false
		}
		var hosts []string
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
			hosts = append(hosts, mh...)
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

// plainHosts reports whether hosts are names or wildcard patterns, without
// placeholders.
func plainHosts(hosts []string) bool {
	if len(hosts) == 0 {
		return false
	}
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, "{}") {
			return false
		}
	}
	return true
}

// hostsMeet reports whether a request's host may match one of a and one
// of b: as caddyhttp.MatchHost matches, a pattern with "*" matches a host
// of as many labels, "*" standing for any one.
func hostsMeet(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if hostMeets(x, y) {
				return true
			}
		}
	}
	return false
}

func hostMeets(x, y string) bool {
	xs, ys := strings.Split(x, "."), strings.Split(y, ".")
	if len(xs) != len(ys) {
		return false
	}
	for i := range xs {
		if xs[i] != "*" && ys[i] != "*" && !strings.EqualFold(xs[i], ys[i]) {
			return false
		}
	}
	return true
}

// mayRenderStatus reports whether an error route's handlers may handle an
// error with status: false only for the Caddyfile's handle_errors with
// statuses (a subroute whose routes all match other statuses).
func mayRenderStatus(handlers []json.RawMessage, status int) bool {
	if len(handlers) != 1 {
		return true
	}
	var sr struct {
		Handler string `json:"handler"`
		Routes  []struct {
			Match caddyhttp.RawMatcherSets `json:"match"`
		} `json:"routes"`
	}
	if err := json.Unmarshal(handlers[0], &sr); err != nil || sr.Handler != "subroute" {
		return true
	}
	for _, r := range sr.Routes {
		if len(r.Match) == 0 {
			return true
		}
		for _, set := range r.Match {
			var expr string
			if len(set) != 1 || json.Unmarshal(set["expression"], &expr) != nil {
				return true
			}
			if match, ok := statusExprMatches(expr, status); !ok || match {
				return true
			}
		}
	}
	return false
}

// statusExprMatches evaluates the expression the Caddyfile's handle_errors
// writes for its statuses ("{http.error.status_code} in [404, 410]", "...
// >= 400 && ... <= 499", joined by " || ") for status; ok is false for any
// other expression.
func statusExprMatches(expr string, status int) (match, ok bool) {
	const code = "{http.error.status_code}"
	for term := range strings.SplitSeq(expr, " || ") {
		if list, isList := strings.CutPrefix(term, code+" in ["); isList {
			list, closed := strings.CutSuffix(list, "]")
			if !closed {
				return false, false
			}
			for c := range strings.SplitSeq(list, ", ") {
				n, err := strconv.Atoi(c)
				if err != nil {
					return false, false
				}
				match = match || n == status
			}
			continue
		}
		var lo, hi int
		if n, err := fmt.Sscanf(term, code+" >= %d && "+code+" <= %d", &lo, &hi); err != nil || n != 2 ||
			term != fmt.Sprintf(code+" >= %d && "+code+" <= %d", lo, hi) {
			return false, false
		}
		match = match || (lo <= status && status <= hi)
	}
	return match, true
}
