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
		return live.Globals("") + live.Site(
			caddytesting.Zone("ops_metrics_reload", caddytesting.MatchPath("/limited"), caddytesting.ClientKey, "limit 1 1h"),
			fmt.Sprintf("respond %q", body))
	}
	live.Load(t, cfg("one"))
	live.ExpectCodes(t, "/limited", []string{"X-Client", "c"}, 200, 429)
	expectValue(t, live.Scrape(t), 1, mRequests, "zone", "ops_metrics_reload", "result", "denied")

	live.Load(t, cfg("two"))
	live.WaitServing(t, "two", "/") // "/" is not in the zone
	caddytesting.ExpectCode(t, live.Get(t, "/limited", "X-Client", "c"), 429, "after the reload")
	fams := live.Scrape(t)
	expectValue(t, fams, 2, mRequests, "zone", "ops_metrics_reload", "result", "denied")
	expectValue(t, fams, 1, mRequests, "zone", "ops_metrics_reload", "result", "allowed")
}
