package ops

import (
	"fmt"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
)

// TestMetricsCountAcrossReload: a denial, a reload (the zone unchanged,
// another response), a denial: the admin endpoint's denied counter reads
// 2, not 1: the counters are not restarted by a new config's registry.
func TestMetricsCountAcrossReload(t *testing.T) {
	cfg := func(body string) string {
		return live.Globals("") + fmt.Sprintf(`
http://:%d {
	rate_limit {
		zone ops_metrics_reload {
			match {
				path /limited
			}
			key {http.request.header.X-Client}
			limit 1 1h
		}
	}
	respond %q
}
`, httpPort, body)
	}
	live.Load(t, cfg("one"))
	caddytesting.ExpectCode(t, live.Get(t, "/limited", "X-Client", "c"), 200, "first")
	caddytesting.ExpectCode(t, live.Get(t, "/limited", "X-Client", "c"), 429, "second")
	expectValue(t, live.Scrape(t), 1, mRequests, "zone", "ops_metrics_reload", "result", "denied")

	live.Load(t, cfg("two"))
	live.WaitServing(t, "two", "/") // "/" is not in the zone
	caddytesting.ExpectCode(t, live.Get(t, "/limited", "X-Client", "c"), 429, "after the reload")
	fams := live.Scrape(t)
	expectValue(t, fams, 2, mRequests, "zone", "ops_metrics_reload", "result", "denied")
	expectValue(t, fams, 1, mRequests, "zone", "ops_metrics_reload", "result", "allowed")
}
