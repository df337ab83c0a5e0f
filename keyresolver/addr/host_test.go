package addr

import (
	"net"
	"strings"
	"testing"
)

// splitCanonicalIPv4 is CanonicalIPv4Host by net.SplitHostPort and netip.
// A bracketed address ("[192.0.2.7]:80", never a RemoteAddr) is left to
// the general path.
func splitCanonicalIPv4(hostport string) (string, bool) {
	if strings.HasPrefix(hostport, "[") {
		return "", false
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil || !netipCanonicalIPv4(host) {
		return "", false
	}
	return host, true
}

// CanonicalIPv4Host, the shortcut for a RemoteAddr, takes exactly the
// addresses that net.SplitHostPort splits into a canonical IPv4 host, and
// the same host.
func TestCanonicalIPv4Host(t *testing.T) {
	for _, s := range []string{
		"192.0.2.7:1234", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:", "1.2.3.4:http",
		"1.2.3.4", "1.2.3.4:80:90", "1.2.3.4:[80]", "1.2.3.4:8]", "01.2.3.4:80", "1.2.3.256:80",
		"1.2.3:80", "1.2.3.4.5:80", "[1.2.3.4]:80", "::1:80", ":80", "", "1.2.3.4 :80", "1.2.3.4x:80",
	} {
		host, ok := CanonicalIPv4Host(s)
		wantHost, wantOK := splitCanonicalIPv4(s)
		if host != wantHost || ok != wantOK {
			t.Errorf("CanonicalIPv4Host(%q) = %q, %v, want %q, %v", s, host, ok, wantHost, wantOK)
		}
	}
}

// FuzzCanonicalIPv4Host: CanonicalIPv4Host agrees with net.SplitHostPort
// and netip.
func FuzzCanonicalIPv4Host(f *testing.F) {
	for _, s := range []string{"192.0.2.7:1234", "1.2.3.4:80:90", "01.2.3.4:1", "1.2.3.4:[", "[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, ok := CanonicalIPv4Host(s)
		wantHost, wantOK := splitCanonicalIPv4(s)
		if host != wantHost || ok != wantOK {
			t.Fatalf("CanonicalIPv4Host(%q) = %q, %v, want %q, %v", s, host, ok, wantHost, wantOK)
		}
	})
}
