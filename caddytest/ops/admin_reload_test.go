package ops

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// TestAdminAfterFailedReload: a reload whose config fails at provisioning
// leaves the old config running, and the admin API (started anew for the
// failed load) still answers for the old config's zones, whose counts the
// failed load kept. A config without rate_limit then has no zones.
func TestAdminAfterFailedReload(t *testing.T) {
	srv := redistest.Start(t)
	const memZone, redisZone = "ops_admfail_mem", "ops_admfail_redis"
	zones := caddytesting.Zone(memZone, caddytesting.ClientKey, "limit 3 1h") +
		"\t}\n\trate_limit {\n" +
		caddytesting.Zone(redisZone, caddytesting.ClientKey, "limit 3 1h") +
		"\t\tstore redis\n" + caddytesting.RedisBlock(srv.Addr)
	live.LoadSites(t, live.HostSite("running.test", zones, `respond "ok"`))
	hdr := []string{"Host", "running.test", "X-Client", "c1"}
	live.ExpectCodes(t, "/", hdr, 200, 200)

	// Both handlers name memZone with different limits: the config adapts
	// but fails when its second handler is provisioned.
	msg := live.LoadError(t, live.Globals("")+
		live.HostSite("a.test", caddytesting.Zone(memZone, caddytesting.ClientKey, "limit 3 1h"), `respond "a"`)+
		live.HostSite("b.test", caddytesting.Zone(memZone, caddytesting.ClientKey, "limit 5 1h"), `respond "b"`))
	if !strings.Contains(msg, "defined differently") {
		t.Fatalf("the failing load's error: %s", msg)
	}

	list := adminGet(t, "/rate_limit/zones")["zones"].([]any)
	var names []string
	for _, z := range list {
		names = append(names, z.(map[string]any)["name"].(string))
	}
	if len(names) != 2 || names[0] != memZone || names[1] != redisZone {
		t.Fatalf("zones after the failed reload: %v, want the running %s and %s", names, memZone, redisZone)
	}
	for _, zone := range []string{memZone, redisZone} {
		key := adminGet(t, "/rate_limit/zones/"+zone+"/keys/c1")
		if tier := key["tiers"].([]any)[0].(map[string]any); tier["used"] != 2.0 {
			t.Fatalf("%s: key c1 after the failed reload: %v, want the 2 used before it", zone, key)
		}
		if out, err := rateLimitCLI(t, "get", "--zone", zone, "--key", "c1"); err != nil || !strings.Contains(out, "2 of 3 used per 1h") {
			t.Fatalf("%s: rate-limit get: %v\n%s", zone, err, out)
		}
	}
	// The API acts on the running zones: a block refuses c1, an unblock
	// and a reset give it its 3 again.
	if code, body := adminDo(t, "POST", "/rate_limit/zones/"+memZone+"/keys/c1/block", `{"duration": "1h"}`); code != 200 {
		t.Fatalf("block: %d %s", code, body)
	}
	live.ExpectCodes(t, "/", hdr, 429)
	for _, path := range []string{"/keys/c1/block", "/keys/c1"} {
		for _, zone := range []string{memZone, redisZone} {
			if code, body := adminDo(t, "DELETE", "/rate_limit/zones/"+zone+path, ""); code != 200 {
				t.Fatalf("DELETE %s%s: %d %s", zone, path, code, body)
			}
		}
	}
	live.ExpectCodes(t, "/", hdr, 200, 200, 200, 429)

	// A config without rate_limit: no zones.
	live.LoadSites(t, fmt.Sprintf("\nhttp://running.test:%d {\n\trespond \"plain\"\n}\n", live.HTTPPort))
	if list := adminGet(t, "/rate_limit/zones")["zones"].([]any); len(list) != 0 {
		t.Fatalf("zones of a config without rate_limit: %v", list)
	}
	if code, body := adminDo(t, "GET", "/rate_limit/zones/"+memZone+"/keys/c1", ""); code != 404 || !strings.Contains(body, "unknown zone") {
		t.Fatalf("a key of a zone no longer loaded: %d %s, want 404", code, body)
	}
}

// TestRateLimitCommandErrors: `caddy rate-limit` with a missing or unknown
// subcommand, missing flags or a block the stores cannot keep fails with a
// message saying what is wrong.
func TestRateLimitCommandErrors(t *testing.T) {
	const zone = "ops_admcli_mem"
	live.LoadSites(t, live.HostSite("cli.test", caddytesting.Zone(zone, caddytesting.ClientKey, "limit 3 1h"), `respond "ok"`))
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{nil, "missing subcommand: want zones, get, reset, block or unblock"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"zones", "extra"}, `unknown command "extra"`},
		{[]string{"get", "--zone", zone}, "--zone and --key are required"},
		{[]string{"get", "--zone", "nope", "--key", "k"}, `unknown zone "nope" (HTTP 404)`},
		{[]string{"block", "--zone", zone, "--key", "k"}, "--for: want a positive duration"},
		{[]string{"block", "--zone", zone, "--key", "k", "--for", "-1h"}, "--for: want a positive duration"},
		{[]string{"block", "--zone", zone, "--key", "k", "--for", "4000d"}, "duration must be at most 3650d (about 10 years), got 96000h0m0s (HTTP 400)"},
		{[]string{"zones", "--for", "1h"}, "unknown flag: --for"},
	} {
		if out, err := rateLimitCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("rate-limit %v: %v (printed %q), want an error with %q", c.args, err, out, c.msg)
		}
	}
	if code, body := adminDo(t, "GET", "/rate_limit/zones/"+zone+"/keys/k", ""); code != 200 || strings.Contains(body, "blocked_until") {
		t.Errorf("key k after the refused blocks: %d %s, want not blocked", code, body)
	}
}
