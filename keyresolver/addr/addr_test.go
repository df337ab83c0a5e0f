package addr

import (
	"net/netip"
	"testing"
)

func TestGroup(t *testing.T) {
	for _, tc := range []struct {
		in     string
		v4, v6 int
		want   string
	}{
		{"1.2.3.4", 32, 128, "1.2.3.4"},
		{"1.2.3.4", 24, 128, "1.2.3.0/24"},
		{"1.2.3.4", 16, 128, "1.2.0.0/16"},
		{"1.2.3.4", 1, 128, "0.0.0.0/1"},
		{"1.2.3.4", 0, 0, "1.2.3.4"},
		{"1.2.3.4:5678", 32, 128, "1.2.3.4"},
		{"1.2.3.4:5678", 24, 128, "1.2.3.0/24"},
		{"2001:db8:1:2:3:4:5:6", 32, 128, "2001:db8:1:2:3:4:5:6"},
		{"2001:db8:1:2:3:4:5:6", 32, 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 32, 48, "2001:db8:1::/48"},
		{"2001:DB8:0001:0002:0:0:0:1", 32, 128, "2001:db8:1:2::1"},
		{"[2001:db8:1:2::1]:443", 32, 64, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]", 32, 128, "2001:db8:1:2::1"},
		{"fe80::1%eth0", 32, 128, "fe80::1"},
		{"fe80::1%eth0", 32, 10, "fe80::/10"},
		{"::ffff:10.1.2.3", 24, 64, "10.1.2.0/24"},
		{"::1", 32, 128, "::1"},
		{"::", 32, 64, "::/64"},
		// not addresses: unchanged
		{"", 24, 64, ""},
		{"a", 24, 64, "a"},
		{"abc:GET", 24, 64, "abc:GET"},
		{"1.2.3.4:GET", 24, 64, "1.2.3.4:GET"},
		{"1.2.3.4:99999999", 24, 64, "1.2.3.4:99999999"},
		{"1.2.3", 24, 64, "1.2.3"},
		{"1.2.3.4.5", 24, 64, "1.2.3.4.5"},
		{"tenant-1", 24, 64, "tenant-1"},
		{"[::1", 24, 64, "[::1"},
		{"[::1]x", 24, 64, "[::1]x"},
		{"[1.2.3.4]", 24, 64, "[1.2.3.4]"},
		{"deadbeef", 24, 64, "deadbeef"},
		{"2001:db8::1:GET", 24, 64, "2001:db8::1:GET"},
	} {
		if got := Group(tc.in, tc.v4, tc.v6); got != tc.want {
			t.Errorf("Group(%q, %d, %d) = %q, want %q", tc.in, tc.v4, tc.v6, got, tc.want)
		}
	}
}

// canonicalIPv4, Group's shortcut for the common key, accepts exactly
// the IPv4 addresses that netip writes as they are.
func TestCanonicalIPv4(t *testing.T) {
	for _, s := range []string{
		"0.0.0.0", "1.2.3.4", "192.0.2.7", "255.255.255.255", "10.0.10.100",
		"01.2.3.4", "1.2.3.04", "1.2.3.00", "256.1.1.1", "1.2.3.1000", "1.2.3.4.", ".1.2.3",
		"1..2.3", "1.2.3", "1.2.3.4.5", "1.2.3.4:80", "::ffff:1.2.3.4", "1.2.3.-4", "", ".", "1.2.3.4 ",
	} {
		if got, want := canonicalIPv4(s), netipCanonicalIPv4(s); got != want {
			t.Errorf("canonicalIPv4(%q) = %v, want %v", s, got, want)
		}
	}
}

// netipCanonicalIPv4 is canonicalIPv4 by netip.
func netipCanonicalIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4() && a.String() == s
}

// FuzzCanonicalIPv4: canonicalIPv4 agrees with netip.
func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{"192.0.2.7", "01.2.3.4", "256.0.0.1", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := canonicalIPv4(s), netipCanonicalIPv4(s); got != want {
			t.Fatalf("canonicalIPv4(%q) = %v, netip says %v", s, got, want)
		}
	})
}

func TestGroupNoAlloc(t *testing.T) {
	for _, s := range []string{"192.0.2.7", "tenant-1:GET", "2001:db8::1", ""} {
		if n := testing.AllocsPerRun(100, func() { _ = Group(s, 32, 128) }); n != 0 {
			t.Errorf("Group(%q) allocates %v times", s, n)
		}
	}
}

// FuzzGroup: Group never panics, leaves non-addresses alone, turns
// addresses into an address or a prefix, and is idempotent.
func FuzzGroup(f *testing.F) {
	for _, s := range []string{"192.0.2.7", "192.0.2.7:80", "[2001:db8::1]:443", "fe80::1%eth0", "::ffff:1.2.3.4", "tenant:GET", "1.2.3.4.5", "[::1"} {
		f.Add(s, 24, 64)
	}
	f.Fuzz(func(t *testing.T, s string, v4, v6 int) {
		got := Group(s, v4, v6)
		if got != s {
			if _, err := netip.ParseAddr(got); err != nil {
				if _, err := netip.ParsePrefix(got); err != nil {
					t.Fatalf("Group(%q) = %q: neither an address nor a prefix", s, got)
				}
			}
		}
		if again := Group(got, v4, v6); again != got {
			t.Fatalf("Group(%q) = %q, then %q", s, got, again)
		}
	})
}
