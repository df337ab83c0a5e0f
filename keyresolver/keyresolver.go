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
	"net/netip"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
// IPv4.
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

// The lengths of IPv4 and IPv6 addresses in bits: the largest prefixes,
// and the ones that keep each address alone.
const (
	IPv4Bits = 32
	IPv6Bits = 128
)

// CheckPrefix checks the prefix length bits of addresses of max bits
// (IPv4Bits or IPv6Bits), named option in the error: 1 to max, or 0 (not
// set: the full length, each address alone, as in mholt/caddy-ratelimit).
func CheckPrefix(option string, bits, max int) error {
	if bits < 0 || bits > max {
		return fmt.Errorf("%s must be between 1 and %d bits (or 0: not set), got %d", option, max, bits)
	}
	return nil
}

// NewTemplate returns the template resolver for tmpl, grouping IPv4
// addresses by ipv4Prefix bits (1..32; 0 means 32) and IPv6 addresses by
// ipv6Prefix bits (1..128; 0 means 128). A template whose braces are not
// placeholders is refused (see CheckTemplate). The empty template is the
// static empty key.
func NewTemplate(tmpl string, ipv4Prefix, ipv6Prefix int) (*Template, error) {
	if err := CheckTemplate(tmpl); err != nil {
		return nil, fmt.Errorf("key: %v", err)
	}
	if err := CheckPrefix("ipv4_prefix", ipv4Prefix, IPv4Bits); err != nil {
		return nil, err
	}
	if err := CheckPrefix("ipv6_prefix", ipv6Prefix, IPv6Bits); err != nil {
		return nil, err
	}
	if ipv4Prefix == 0 {
		ipv4Prefix = IPv4Bits
	}
	if ipv6Prefix == 0 {
		ipv6Prefix = IPv6Bits
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
		if fullV4(t.v4bits) && !earlyData(r) {
			if host, ok := canonicalIPv4Host(r.RemoteAddr); ok {
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

// fullV4 reports whether an IPv4 prefix of v4bits keeps the whole address
// (out of range: clamped to 32).
func fullV4(v4bits int) bool {
	return v4bits <= 0 || v4bits >= 32
}

// Group returns s grouped by the template's prefixes if s is an IP address
// (with or without a port), and s itself otherwise.
func (t *Template) Group(s string) string {
	return GroupAddr(s, t.v4bits, t.v6bits)
}

// GroupAddr returns s unchanged unless it is an IP address, possibly with a
// port ("1.2.3.4", "1.2.3.4:80", "::1", "[::1]:80", "fe80::1%eth0"). An
// address is returned in canonical form when the prefix for its family is
// the full length, and otherwise as the masked network in prefix form
// ("10.1.2.0/24", "2001:db8::/64"). Bits out of range are clamped.
func GroupAddr(s string, v4bits, v6bits int) string {
	if fullV4(v4bits) && canonicalIPv4(s) {
		return s // the common key, already in its canonical form
	}
	if !mayBeAddr(s) {
		return s
	}
	addr, ok := parseAddr(s)
	if !ok {
		return s
	}
	addr = addr.Unmap().WithZone("")
	bits := v6bits
	if addr.Is4() {
		bits = v4bits
	}
	if bits <= 0 || bits > addr.BitLen() {
		bits = addr.BitLen()
	}
	var buf [64]byte
	var out []byte
	if bits == addr.BitLen() {
		out = addr.AppendTo(buf[:0])
	} else {
		p, err := addr.Prefix(bits)
		if err != nil { // cannot happen: bits is in range
			return s
		}
		out = p.AppendTo(buf[:0])
	}
	if string(out) == s { // no allocation when s is already canonical
		return s
	}
	return string(out)
}

// canonicalIPv4 reports whether s is an IPv4 address as netip.Addr.String
// writes it: the result of grouping it by /32, found without parsing and
// formatting it.
func canonicalIPv4(s string) bool {
	n := canonicalIPv4Len(s)
	return n > 0 && n == len(s)
}

// canonicalIPv4Host returns the host of hostport when hostport is an IPv4
// address as netip.Addr.String writes it and a port ("192.0.2.1:1234", a
// RemoteAddr): what net.SplitHostPort, then GroupAddr with the full
// prefix, make of it, in one pass.
func canonicalIPv4Host(hostport string) (string, bool) {
	n := canonicalIPv4Len(hostport)
	if n == 0 || n == len(hostport) || hostport[n] != ':' {
		return "", false
	}
	for i := n + 1; i < len(hostport); i++ {
		switch hostport[i] {
		case ':', '[', ']': // net.SplitHostPort's errors
			return "", false
		}
	}
	return hostport[:n], true
}

// canonicalIPv4Len returns the length of the IPv4 address that s starts
// with, up to its first byte that is neither a digit nor a dot, if that is
// an address as netip.Addr.String writes it (four decimal fields of 0-255,
// without leading zeros); 0 if it is not.
func canonicalIPv4Len(s string) int {
	fields, n, digits := 0, 0, 0
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if digits == 0 {
				return 0
			}
			fields++
			n, digits = 0, 0
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if digits > 0 && n == 0 {
			return 0 // a leading zero
		}
		n = n*10 + int(c-'0')
		digits++
		if n > 255 {
			return 0
		}
	}
	if fields != 3 || digits == 0 {
		return 0
	}
	return i
}

// mayBeAddr is a cheap filter so that keys that are plainly not addresses
// are not handed to the parser (whose errors allocate).
func mayBeAddr(s string) bool {
	if len(s) < 2 || len(s) > 64 {
		return false
	}
	c := s[0]
	if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '[') {
		return false
	}
	return strings.IndexByte(s, '.') >= 0 || strings.IndexByte(s, ':') >= 0
}

// parseAddr parses an address, an address with a port, or a bracketed IPv6
// address with or without a port.
func parseAddr(s string) (netip.Addr, bool) {
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		rest := s[end+1:]
		if rest != "" && !isPort(rest) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		return a, err == nil && a.Is6()
	}
	if strings.Count(s, ":") == 1 { // IPv4 with a port
		i := strings.IndexByte(s, ':')
		if !isPort(s[i:]) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[:i])
		return a, err == nil && a.Is4()
	}
	if !plausibleAddr(s) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// isPort reports whether s is ":" followed by 1 to 5 digits.
func isPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// plausibleAddr reports whether s only holds characters an IP address can
// (before an IPv6 zone, which may hold anything).
func plausibleAddr(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F', c == '.', c == ':':
		case c == '%':
			return true
		default:
			return false
		}
	}
	return true
}

// Interface guard.
var _ KeyResolver = (*Template)(nil)
