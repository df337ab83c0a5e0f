package keyresolver

import (
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// UnsetPathSegment returns the first placeholder of a path segment in tmpl
// that Caddy never sets: {http.request.uri.path.<i>} takes a segment
// number from 0, so a name (RussellLuo/caddy-ext's {path.id}, say) or a
// negative number always gives "", and so does the key if nothing else is
// in it.
func UnsetPathSegment(tmpl string) (string, bool) {
	return firstPlaceholder(tmpl, "http.request.uri.path.", func(seg string) bool {
		n, err := strconv.Atoi(seg)
		return err != nil || n < 0
	})
}

// firstPlaceholder returns the first placeholder of tmpl whose name starts
// with prefix and for which bad holds of the rest of its name.
func firstPlaceholder(tmpl, prefix string, bad func(rest string) bool) (string, bool) {
	for rest := tmpl; ; {
		i := strings.Index(rest, "{"+prefix)
		if i < 0 {
			return "", false
		}
		rest = rest[i:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", false
		}
		if bad(rest[1+len(prefix) : end]) {
			return rest[:end+1], true
		}
		rest = rest[end+1:]
	}
}

// UnknownRequestPlaceholder returns the first placeholder of tmpl in
// Caddy's http.request namespace that Caddy does not set: a typo such as
// {http.request.haeder.X-Api-Key}, or a header name no request can carry
// ({http.request.header.X Api}). The replacer gives it the same value,
// the empty string, for every request: one key, or one number, for all.
// The names are those of Caddy v2's HTTP replacer.
func UnknownRequestPlaceholder(tmpl string) (string, bool) {
	return firstPlaceholder(tmpl, "http.request.", func(name string) bool { return !knownRequestPlaceholder(name) })
}

// requestPlaceholders are the names under http.request that Caddy's
// replacer sets as they are; requestPrefixes those it sets for any
// name (a header, a cookie, a query parameter) or number after them.
var (
	requestPlaceholders = []string{
		"method", "scheme", "proto", "proto_name", "host", "port", "hostport",
		"local", "local.host", "local.port", "remote", "remote.host", "remote.port",
		"uri", "uri_escaped", "uri.path", "uri.path_escaped", "uri.path.file", "uri.path.dir",
		"uri.path.file.base", "uri.path.file.ext", "uri.query", "uri.query_escaped",
		"uri.prefixed_query", "duration", "duration_ms", "uuid", "body", "body_base64",
		"orig_method", "orig_uri", "orig_uri.path", "orig_uri.path.file",
		"orig_uri.path.file_escaped", "orig_uri.path.dir", "orig_uri.query",
		"orig_uri.prefixed_query",
	}
	requestPrefixes = []string{
		"cookie.", "uri.query.", "uri.path.", "orig_uri.path.", "host.labels.", "tls.", "remote.host/",
	}
)

// knownRequestPlaceholder reports whether Caddy sets http.request.<name>.
func knownRequestPlaceholder(name string) bool {
	if field, ok := strings.CutPrefix(name, "header."); ok {
		return httpguts.ValidHeaderFieldName(field)
	}
	if slices.Contains(requestPlaceholders, name) {
		return true
	}
	for _, p := range requestPrefixes {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}
