package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/caddytesting"
)

// respondKey is the directive of a site that answers the request's key.
const respondKey = `respond "{http.rate_limit.key}"`

// randomIP returns a random documentation or private address, v4 or v6.
func randomIP(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), 1+r.IntN(254))
	}
	return fmt.Sprintf("2001:db8:%x:%x::%x", r.IntN(1<<16), r.IntN(1<<16), 1+r.IntN(1<<16))
}

// With trusted_proxies that do not include the client (127.0.0.1), the
// client address is the connection's: forged X-Forwarded-For (and
// X-Real-IP, Forwarded) headers, all different, cannot escape a per-address
// limit on {client_ip}.
//
// The key is {client_ip}, the Caddyfile shorthand of {http.vars.client_ip}:
// Caddy has no {http.request.client_ip} placeholder (README.md shows that
// one; it evaluates to "" and, with empty_key global, puts every client in
// one shared count).
func TestForgedForwardedForCounts(t *testing.T) {
	live.Load(t, live.Globals(`	servers {
		trusted_proxies static 10.0.0.0/8
	}`)+live.Site(caddytesting.Zone("ops_xff_forged", "key {client_ip}", "ipv6_prefix 64", "limit 3 1h"), respondKey))
	rnd := rand.New(rand.NewPCG(1, 2))
	forge := func() []string {
		ip := randomIP(rnd)
		return []string{"X-Forwarded-For", ip + ", " + randomIP(rnd), "X-Real-IP", ip, "Forwarded", "for=" + ip}
	}
	for i := 1; i <= 3; i++ {
		r := live.Get(t, "/", forge()...)
		caddytesting.ExpectCode(t, r, 200, fmt.Sprintf("request %d", i))
		if r.Body != "127.0.0.1" {
			t.Fatalf("request %d: key %q, want 127.0.0.1 (the connection's address; the forged headers ignored)", i, r.Body)
		}
		if caddytesting.Remaining(t, r) != 3-i {
			t.Fatalf("request %d: remaining %q, want %d", i, r.Header.Get("X-RateLimit-Remaining"), 3-i)
		}
	}
	for i := 0; i < 5; i++ {
		caddytesting.ExpectCode(t, live.Get(t, "/", forge()...), 429, "a forged X-Forwarded-For after the limit")
	}
}

// With 127.0.0.1 a trusted proxy and client_ip_headers X-Forwarded-For,
// the forwarded address is the client: distinct addresses are counted
// apart, and with ipv6_prefix 64 two addresses of one /64 share a count
// while an address of another /64 does not.
func TestTrustedForwardedForAndIPv6Prefix(t *testing.T) {
	live.Load(t, live.Globals(`	servers {
		trusted_proxies static 127.0.0.1/32
		client_ip_headers X-Forwarded-For
	}`)+live.Site(caddytesting.Zone("ops_xff_trusted", "key {client_ip}", "ipv6_prefix 64", "limit 1 1h"), respondKey))
	xff := func(ip string) []string { return []string{"X-Forwarded-For", ip} }
	for _, step := range []struct {
		xff, key string
		code     int
		what     string
	}{
		{"203.0.113.7", "203.0.113.7", 200, "first request of 203.0.113.7"},
		{"203.0.113.7", "", 429, "second request of 203.0.113.7"},
		{"203.0.113.8", "203.0.113.8", 200, "another IPv4 address: its own count"},
		{"2001:db8:a:b::1", "2001:db8:a:b::/64", 200, "first address of 2001:db8:a:b::/64"},
		{"2001:db8:a:b:ffff:ffff:ffff:fffe", "", 429, "another address of the same /64: the same client"},
		{"2001:db8:a:c::1", "2001:db8:a:c::/64", 200, "an address of the next /64: another client"},
		{"", "127.0.0.1", 200, "no X-Forwarded-For: the proxy itself"},
		{"", "", 429, "no X-Forwarded-For again"},
	} {
		var hdr []string
		if step.xff != "" {
			hdr = xff(step.xff)
		}
		r := live.Get(t, "/", hdr...)
		caddytesting.ExpectCode(t, r, step.code, step.what)
		if step.code == 200 && r.Body != step.key {
			t.Fatalf("%s: key %q, want %q", step.what, r.Body, step.key)
		}
	}
}

// empty_key allow and global (and global as the default) through Caddy,
// with a header key the requests leave out. (empty_key deny is covered by
// caddytest/integration's TestEmptyKeyAndCost.)
func TestEmptyKeyAllowAndGlobal(t *testing.T) {
	const tenantKey = "key {http.request.header.X-Tenant}"
	live.LoadSites(t, live.Site(
		caddytesting.Zone("ops_empty_allow", caddytesting.MatchPath("/allow"), tenantKey, "empty_key allow", "limit 1 1h")+
			caddytesting.Zone("ops_empty_global", caddytesting.MatchPath("/global"), tenantKey, "empty_key global", "limit 2 1h")+
			caddytesting.Zone("ops_empty_default", caddytesting.MatchPath("/default"), tenantKey, "limit 1 1h"),
		`respond "ok"`))

	// allow: a request without the key is not limited by the zone at all
	// (no headers either); one with a key is.
	for i := 0; i < 5; i++ {
		r := live.Get(t, "/allow")
		caddytesting.ExpectCode(t, r, 200, fmt.Sprintf("allow: keyless request %d", i+1))
		if h := r.Header.Get("RateLimit-Policy") + r.Header.Get("X-RateLimit-Limit"); h != "" {
			t.Fatalf("allow: a keyless request got rate-limit headers (%v): the zone applied", r.Header)
		}
	}
	caddytesting.ExpectCode(t, live.Get(t, "/allow", "X-Tenant", "t1"), 200, "allow: t1 first")
	caddytesting.ExpectCode(t, live.Get(t, "/allow", "X-Tenant", "t1"), 429, "allow: t1 second")

	// global: every keyless request shares one count, apart from the
	// requests with a key.
	r := live.Get(t, "/global")
	caddytesting.ExpectCode(t, r, 200, "global: keyless 1")
	if caddytesting.Remaining(t, r) != 1 {
		t.Fatalf("global: keyless 1: remaining %q, want 1", r.Header.Get("X-RateLimit-Remaining"))
	}
	caddytesting.ExpectCode(t, live.Get(t, "/global", "X-Tenant", ""), 200, "global: keyless 2 (an empty header)")
	caddytesting.ExpectCode(t, live.Get(t, "/global"), 429, "global: keyless 3")
	r = live.Get(t, "/global", "X-Tenant", "t1")
	caddytesting.ExpectCode(t, r, 200, "global: t1 has its own count")
	if caddytesting.Remaining(t, r) != 1 {
		t.Fatalf("global: t1: remaining %q, want 1", r.Header.Get("X-RateLimit-Remaining"))
	}

	// The default is global.
	caddytesting.ExpectCode(t, live.Get(t, "/default"), 200, "default: keyless 1")
	caddytesting.ExpectCode(t, live.Get(t, "/default"), 429, "default: keyless 2 (one shared count)")
	caddytesting.ExpectCode(t, live.Get(t, "/default", "X-Tenant", "t1"), 200, "default: t1")
}

// Behind a load balancer that appends the address it saw to
// X-Forwarded-For (as most do), a client can write any leftmost entries it
// likes. With trusted_proxies_strict, Caddy reads the header right to left
// and takes the first address that is not a trusted proxy: the one the load
// balancer appended. Forged leftmost entries, different on every request,
// neither change the key nor escape the limit. (Without strict, Caddy
// takes the leftmost entry: the forgery.)
func TestForgedLeftmostForwardedForBehindProxy(t *testing.T) {
	live.Load(t, live.Globals(`	servers {
		trusted_proxies static 127.0.0.1/32
		trusted_proxies_strict
		client_ip_headers X-Forwarded-For
	}`)+live.Site(caddytesting.Zone("ops_xff_strict", "key {client_ip}", "limit 3 1h"), respondKey))
	const client = "198.51.100.23" // what the load balancer (127.0.0.1) appends
	rnd := rand.New(rand.NewPCG(3, 4))
	forged := func() []string {
		return []string{"X-Forwarded-For", randomIP(rnd) + ", " + randomIP(rnd) + ", " + client}
	}
	for i := 1; i <= 3; i++ {
		r := live.Get(t, "/", forged()...)
		caddytesting.ExpectCode(t, r, 200, fmt.Sprintf("request %d with forged leftmost entries", i))
		if r.Body != client {
			t.Fatalf("request %d: key %q, want %s (the entry the trusted proxy appended)", i, r.Body, client)
		}
		if caddytesting.Remaining(t, r) != 3-i {
			t.Fatalf("request %d: remaining %q, want %d", i, r.Header.Get("X-RateLimit-Remaining"), 3-i)
		}
	}
	for i := 0; i < 5; i++ {
		caddytesting.ExpectCode(t, live.Get(t, "/", forged()...), 429, "forged leftmost entries after the limit")
	}
	// Another client behind the same load balancer has its own count.
	r := live.Get(t, "/", "X-Forwarded-For", randomIP(rnd)+", 198.51.100.24")
	caddytesting.ExpectCode(t, r, 200, "another client behind the proxy")
}
