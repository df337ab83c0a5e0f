package keyresolver

import (
	"strconv"
	"strings"
)

// UnsetPathSegment returns the first placeholder of a path segment in tmpl
// that Caddy never sets: {http.request.uri.path.<i>} takes a segment
// number from 0, so a name (RussellLuo/caddy-ext's {path.id}, say) or a
// negative number always gives "", and so does the key if nothing else is
// in it.
func UnsetPathSegment(tmpl string) (string, bool) {
	const prefix = "{http.request.uri.path."
	for rest := tmpl; ; {
		i := strings.Index(rest, prefix)
		if i < 0 {
			return "", false
		}
		rest = rest[i:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", false
		}
		if n, err := strconv.Atoi(rest[len(prefix):end]); err != nil || n < 0 {
			return rest[:end+1], true
		}
		rest = rest[end+1:]
	}
}
