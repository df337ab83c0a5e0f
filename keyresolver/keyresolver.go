// Package keyresolver turns a request into the key a rate-limit zone counts
// it under.
//
// The built-in resolver is a placeholder template (Template) evaluated with
// the request's caddy.Replacer; when the result is an IP address it is
// grouped by a configurable prefix (an IPv6 /64 is usually one customer).
// Other resolvers are Caddy guest modules in the namespace
// http.handlers.rate_limit.key_resolvers that implement KeyResolver.
// (Keys are escaped for Redis by the Redis store: redisstore.EscapeKey.)
package keyresolver

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/zonelimit/caddy-ratelimit/keyresolver/addr"
)

// KeyResolver turns a request into a rate-limit key. The empty string means
// the request has no key; the zone's empty_key setting decides what it
// gets. An error fails the request's resolution; the handler treats it like
// an empty key and logs it.
//
// Guest modules in the namespace http.handlers.rate_limit.key_resolvers
// implement it. Key is called concurrently and must not block for long: it
// is on the path of every request.
type KeyResolver interface {
	Key(r *http.Request) (string, error)
}

// Template is the default KeyResolver: a placeholder template such as
// "{http.request.remote.host}" or
// "{http.request.header.X-Org-Id}:{http.request.method}". Unknown
// placeholders evaluate to the empty string.
//
// When the whole result is an IP address (optionally with a port, as
// "1.2.3.4:80" or "[::1]:80", and with an IPv6 zone, which is dropped), the
// key is the address grouped by the configured prefix: the canonical address
// when the prefix is the full length (32 or 128), otherwise the network in
// prefix form, e.g. "2001:db8:1:2::/64". IPv4-mapped IPv6 addresses count as
// IPv4. (See addr.Group.)
type Template struct {
	template   string
	static     bool // no placeholders: the template is the key
	remoteHost bool // the template is {http.request.remote.host}: read it directly
	clientIP   bool // the template is {http.vars.client_ip}: read the var directly
	v4bits     int
	v6bits     int
}

// remoteHostPlaceholder is the most common key; Template evaluates it
// without the replacer, as Caddy's replacer does, but without allocating.
const remoteHostPlaceholder = "{http.request.remote.host}"

// The client address as Caddy resolves it with trusted_proxies, and the
// name users guess for it (accepted as an alias).
const (
	clientIPPlaceholder = "{http.vars.client_ip}"
	clientIPAlias       = "{http.request.client_ip}"
)

// NewTemplate returns the template resolver for tmpl, grouping IPv4
// addresses by ipv4Prefix bits (1..32; 0 means 32) and IPv6 addresses by
// ipv6Prefix bits (1..128; 0 means 128). A template whose braces are not
// placeholders is refused (see CheckTemplate). The empty template is the
// static empty key.
func NewTemplate(tmpl string, ipv4Prefix, ipv6Prefix int) (*Template, error) {
	if err := CheckTemplate(tmpl); err != nil {
		return nil, fmt.Errorf("key: %v", err)
	}
	if err := addr.CheckPrefix("ipv4_prefix", ipv4Prefix, addr.IPv4Bits); err != nil {
		return nil, err
	}
	if err := addr.CheckPrefix("ipv6_prefix", ipv6Prefix, addr.IPv6Bits); err != nil {
		return nil, err
	}
	if ipv4Prefix == 0 {
		ipv4Prefix = addr.IPv4Bits
	}
	if ipv6Prefix == 0 {
		ipv6Prefix = addr.IPv6Bits
	}
	// {http.request.client_ip} is what users guess for Caddy's client
	// address; Caddy names it {http.vars.client_ip} ({client_ip} in a
	// Caddyfile). Without this, the guess would be an unknown placeholder,
	// an empty key for every request: one count shared by all clients.
	tmpl = strings.ReplaceAll(tmpl, clientIPAlias, clientIPPlaceholder)
	t := &Template{
		template:   tmpl,
		static:     !strings.ContainsAny(tmpl, "{}"),
		remoteHost: tmpl == remoteHostPlaceholder,
		clientIP:   tmpl == clientIPPlaceholder,
		v4bits:     ipv4Prefix,
		v6bits:     ipv6Prefix,
	}
	if t.static {
		// A static key that is an address is grouped once, here.
		t.template = t.Group(tmpl)
	}
	return t, nil
}

// String returns the template.
func (t *Template) String() string { return t.template }

// Key evaluates the template with the request's replacer and groups an
// address result by prefix. It never returns an error.
func (t *Template) Key(r *http.Request) (string, error) {
	if t.static {
		return t.template, nil
	}
	if t.remoteHost {
		if addr.FullV4(t.v4bits) && !earlyData(r) {
			if host, ok := addr.CanonicalIPv4Host(r.RemoteAddr); ok {
				return host, nil // the common key, in one pass
			}
		}
		return t.Group(remoteHost(r)), nil
	}
	if t.clientIP {
		// Set by Caddy's server for every request (trusted_proxies).
		if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok {
			return t.Group(ip), nil
		}
	}
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	return t.Group(repl.ReplaceAll(t.template, "")), nil
}

// remoteHost is the value of {http.request.remote.host}, as Caddy's
// replacer computes it.
func remoteHost(r *http.Request) string {
	if earlyData(r) {
		return ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr // a unix socket
	}
	return host
}

// earlyData reports whether r came in TLS early data, whose address may be
// spoofed.
func earlyData(r *http.Request) bool {
	return r.TLS != nil && !r.TLS.HandshakeComplete
}

// Group returns s grouped by the template's prefixes if s is an IP address
// (with or without a port), and s itself otherwise.
func (t *Template) Group(s string) string {
	return addr.Group(s, t.v4bits, t.v6bits)
}

// Interface guard.
var _ KeyResolver = (*Template)(nil)
