// Package addr groups the IP addresses in rate-limit keys: an address, with
// or without a port, becomes its canonical form or the network of a
// configured prefix ("2001:db8:1:2::/64"), so that one customer's
// addresses share a count. It is pure string and netip work (no Caddy),
// on the path of every request: the common key, a canonical IPv4 address,
// is recognised without parsing or allocating.
package addr

import (
	"fmt"
	"net/netip"
	"strings"
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

// FullV4 reports whether an IPv4 prefix of v4bits keeps the whole address
// (out of range: clamped to 32).
func FullV4(v4bits int) bool {
	return v4bits <= 0 || v4bits >= 32
}

// Group returns s unchanged unless it is an IP address, possibly with a
// port ("1.2.3.4", "1.2.3.4:80", "::1", "[::1]:80", "fe80::1%eth0"). An
// address is returned in canonical form when the prefix for its family is
// the full length, and otherwise as the masked network in prefix form
// ("10.1.2.0/24", "2001:db8::/64"). Bits out of range are clamped.
func Group(s string, v4bits, v6bits int) string {
	if FullV4(v4bits) && canonicalIPv4(s) {
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

// CanonicalIPv4Host returns the host of hostport when hostport is an IPv4
// address as netip.Addr.String writes it and a port ("192.0.2.1:1234", a
// RemoteAddr): what net.SplitHostPort, then Group with the full
// prefix, make of it, in one pass.
func CanonicalIPv4Host(hostport string) (string, bool) {
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
