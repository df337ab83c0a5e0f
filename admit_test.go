package ratelimit

import (
	"fmt"
	"strings"
	"testing"
)

// zonesConfig is a handler config with one zone per limit, named z1, z2,
// ..., each of limit events per minute on the key k, the last one's on
// lastKey.
func zonesConfig(extra, lastKey string, limits ...int) string {
	zones := make([]string, len(limits))
	for i, n := range limits {
		key := "k"
		if i == len(limits)-1 {
			key = lastKey
		}
		zones[i] = fmt.Sprintf(`{"name":"z%d","key":%q,"limits":[{"events":%d,"window":"1m"}]}`, i+1, key, n)
	}
	return `{` + extra + `"zones":[` + strings.Join(zones, ",") + `]}`
}

// The reported decision: with more zones than the handler keeps on its
// stack, the admitted one with the fewest remaining, the first of equals;
// in a dry run, the first denial, whatever the zones around it admitted.
func TestReportedZone(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		limits      []int
		requests    int
		rateLimit   string
		zone, left  string
	}{
		{"fewest of many", "", []int{10, 3, 7, 3, 9, 8}, 1, `"z2";r=2;t=60`, "z2", "2"},
		{"first dry-run denial", `"dry_run":true,`, []int{10, 1, 1, 5}, 2, `"z2";r=0;t=60`, "z2", "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := provision(t, zonesConfig(c.extra, "k", c.limits...), newClock())
			var res result
			for range c.requests {
				res = serve(h, newReq("192.0.2.1:1"))
			}
			if res.code != 200 {
				t.Fatalf("code %d", res.code)
			}
			expectHeaders(t, res, map[string]string{"RateLimit": c.rateLimit})
			expectPlaceholders(t, res, map[string]string{"{http.rate_limit.zone}": c.zone, "{http.rate_limit.remaining}": c.left})
		})
	}
}

// A denial by the last of more zones than the handler keeps on its stack
// gives back what every zone before it admitted.
func TestDenialUndoesManyZones(t *testing.T) {
	h := provision(t, zonesConfig("", "{http.request.header.X-Key}", 2, 2, 2, 2, 2, 1), newClock())
	for i, step := range []struct {
		key  string
		code int
	}{
		{"a", 200}, // every zone 1/2, the last 1/1 for a
		{"a", 429}, // the last refuses a: the others give their unit back
		{"b", 200}, // so they admit b, 2/2
		{"c", 429}, // and are full now
	} {
		if res := serve(h, newReq("192.0.2.1:1", header("X-Key", step.key))); res.code != step.code {
			t.Fatalf("request %d (%s): code %d, want %d", i+1, step.key, res.code, step.code)
		}
	}
}
