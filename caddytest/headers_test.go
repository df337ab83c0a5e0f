package integration

import (
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
)

// A deferred header handler edits the rate-limit headers in place after
// rate_limit set them: each response must carry its own edit, not one
// made to an earlier response's values.
func TestHeaderEditedAfterwards(t *testing.T) {
	live.LoadSites(t, live.Site(caddytesting.Zone("hdr_edit", caddytesting.ClientKey, "limit 10 1m"), `
	header {
		RateLimit-Policy "hdr_edit" "{http.request.uri.path}"
		X-RateLimit-Limit "10" "{http.request.uri.path}"
		defer
	}
	respond "ok"`))
	for _, path := range []string{"/a", "/b", "/c"} {
		r := live.Get(t, path, clientA()...)
		caddytesting.ExpectCode(t, r, 200, path)
		caddytesting.ExpectHeader(t, r, "RateLimit-Policy", `"`+path+`";q=10;w=60`)
		caddytesting.ExpectHeader(t, r, "X-RateLimit-Limit", path)
	}
}
