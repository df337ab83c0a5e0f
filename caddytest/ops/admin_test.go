package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// rateLimitCLI runs `caddy rate-limit args...` in-process against the
// live Caddy's admin endpoint and returns what it printed and its error.
func rateLimitCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c, ok := caddycmd.Commands()["rate-limit"]
	if !ok {
		t.Fatal("no rate-limit command registered")
	}
	root := &cobra.Command{Use: c.Name, SilenceErrors: true}
	c.CobraFunc(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(append(args, "--address", "localhost:"+strconv.Itoa(live.AdminPort)))
	err := root.Execute()
	return out.String(), err
}

// adminDo sends method path (with body, if any) to the admin endpoint and
// returns the status and the body.
func adminDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, live.AdminURL(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r := caddytesting.Send(caddytesting.NoKeepAlive, req)
	if r.Err != nil {
		t.Fatalf("%s %s: %v", method, path, r.Err)
	}
	return r.Code, r.Body
}

// adminGet is the JSON answer of GET path on the admin endpoint.
func adminGet(t *testing.T, path string) map[string]any {
	t.Helper()
	code, body := adminDo(t, "GET", path, "")
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v", path, code, err)
	}
	return v
}

// TestAdminResetKey: a key limited to 429 shows 0 remaining through the
// admin API and the CLI; a reset lets its next request through. With store
// memory and with store redis (whose denial the deny cache remembers).
func TestAdminResetKey(t *testing.T) {
	srv := redistest.Start(t)
	const memZone, redisZone = "ops_admin_mem", "ops_admin_redis"
	site := func(host, zone, store string) string {
		return fmt.Sprintf(`
http://%s:%d {
	rate_limit {
		zone %s {
			key {http.request.header.X-Client}
			limit 2 1h
			limit 10 24h
		}
		%s
	}
	respond "ok"
}
`, host, live.HTTPPort, zone, store)
	}
	live.LoadSites(t, site("mem.test", memZone, "")+
		site("redis.test", redisZone, "store redis\n"+caddytesting.RedisBlock(srv.Addr)))

	zones := adminGet(t, "/rate_limit/zones")["zones"].([]any)
	if len(zones) != 2 {
		t.Fatalf("zones: %v", zones)
	}
	out, err := rateLimitCLI(t, "zones")
	if err != nil || !strings.Contains(out, memZone+": 2 per 1h and 10 per 1d, sliding_log, memory, keys held: 0") ||
		!strings.Contains(out, redisZone+": 2 per 1h and 10 per 1d, sliding_log, redis") {
		t.Fatalf("rate-limit zones: %v\n%s", err, out)
	}

	for _, c := range []struct{ host, zone string }{{"mem.test", memZone}, {"redis.test", redisZone}} {
		hdr := []string{"Host", c.host, "X-Client", "team/a b"}
		live.ExpectCodes(t, "/", hdr, 200, 200, 429)

		key := adminGet(t, "/rate_limit/zones/"+c.zone+"/keys/team%2Fa%20b")
		tier := key["tiers"].([]any)[0].(map[string]any)
		if tier["remaining"] != 0.0 || tier["used"] != 2.0 || key["key"] != "team/a b" {
			t.Fatalf("%s: GET key: %v", c.zone, key)
		}
		out, err := rateLimitCLI(t, "get", "--zone", c.zone, "--key", "team/a b")
		if err != nil || !strings.Contains(out, "2 of 2 used per 1h, 0 remaining") || !strings.Contains(out, "2 of 10 used per 1d, 8 remaining") {
			t.Fatalf("%s: rate-limit get: %v\n%s", c.zone, err, out)
		}

		out, err = rateLimitCLI(t, "reset", "--zone", c.zone, "--key", "team/a b")
		if err != nil || !strings.Contains(out, "reset key team/a b in zone "+c.zone) {
			t.Fatalf("%s: rate-limit reset: %v\n%s", c.zone, err, out)
		}
		if r := live.Get(t, "/", hdr...); r.Code != 200 || caddytesting.Remaining(t, r) != 1 {
			t.Fatalf("%s: request after the reset: %d, remaining %q", c.zone, r.Code, r.Header.Get("X-RateLimit-Remaining"))
		}
	}

	// Errors: the API's message, and a non-zero exit.
	if _, err := rateLimitCLI(t, "get", "--zone", "nope", "--key", "k"); err == nil || !strings.Contains(err.Error(), `unknown zone "nope"`) {
		t.Errorf("rate-limit get of an unknown zone: %v", err)
	}
	if _, err := rateLimitCLI(t, "block", "--zone", memZone, "--key", "k", "--for", "soon"); err == nil || !strings.Contains(err.Error(), "--for") {
		t.Errorf("rate-limit block --for soon: %v", err)
	}

	// Block and unblock, in both stores: refused at once (its limit is not
	// reached), Retry-After the block's time left; then let through.
	for _, c := range []struct{ host, zone string }{{"mem.test", memZone}, {"redis.test", redisZone}} {
		hdr := []string{"Host", c.host, "X-Client", "blocked one"}
		out, err := rateLimitCLI(t, "block", "--zone", c.zone, "--key", "blocked one", "--for", "1h")
		if err != nil || !strings.Contains(out, "blocked key blocked one in zone "+c.zone+" until ") {
			t.Fatalf("%s: rate-limit block: %v\n%s", c.zone, err, out)
		}
		r := live.Get(t, "/", hdr...)
		if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Code != 429 || ra < 3500 || ra > 3600 {
			t.Fatalf("%s: request of a blocked key: %d, Retry-After %q, want 429 and about 3600", c.zone, r.Code, r.Header.Get("Retry-After"))
		}
		if out, err := rateLimitCLI(t, "get", "--zone", c.zone, "--key", "blocked one"); err != nil || !strings.Contains(out, "blocked until") {
			t.Fatalf("%s: rate-limit get of a blocked key: %v\n%s", c.zone, err, out)
		}
		// A reset keeps the block, and says so.
		if out, err := rateLimitCLI(t, "reset", "--zone", c.zone, "--key", "blocked one"); err != nil || !strings.Contains(out, "but it stays blocked until") || strings.Contains(out, "finds it whole") {
			t.Fatalf("%s: rate-limit reset of a blocked key: %v\n%s", c.zone, err, out)
		}
		if r := live.Get(t, "/", hdr...); r.Code != 429 {
			t.Fatalf("%s: request of a blocked key after a reset: %d, want 429", c.zone, r.Code)
		}
		if out, err := rateLimitCLI(t, "unblock", "--zone", c.zone, "--key", "blocked one"); err != nil || !strings.Contains(out, "unblocked key blocked one") || strings.Contains(out, "used up") {
			t.Fatalf("%s: rate-limit unblock: %v\n%s", c.zone, err, out)
		}
		if r := live.Get(t, "/", hdr...); r.Code != 200 {
			t.Fatalf("%s: request after the unblock: %d", c.zone, r.Code)
		}

		// A key unblocked at its limit is still refused: unblock says so.
		hdr = []string{"Host", c.host, "X-Client", "spent one"}
		live.ExpectCodes(t, "/", hdr, 200, 200, 429)
		if _, err := rateLimitCLI(t, "block", "--zone", c.zone, "--key", "spent one", "--for", "1h"); err != nil {
			t.Fatalf("%s: rate-limit block: %v", c.zone, err)
		}
		out, err = rateLimitCLI(t, "unblock", "--zone", c.zone, "--key", "spent one")
		if err != nil || !strings.Contains(out, "its 2 per 1h are used up: its next request is refused") {
			t.Fatalf("%s: rate-limit unblock of a key at its limit: %v\n%s", c.zone, err, out)
		}
	}
}
