package testports

import (
	"net"
	"strconv"
	"testing"
)

// A reserved port is in Range, free, and reserved to its holder: no other
// Reserve returns it, and its file cannot be locked again, until it is
// closed.
func TestReserve(t *testing.T) {
	lo, hi, ok := Range()
	if !ok {
		t.Skip("no room below the ephemeral port range: ports are the kernel's choice")
	}
	p, f, err := Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if p < lo || p >= hi {
		t.Fatalf("port %d outside %d-%d", p, lo, hi-1)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("reserved port %d not free: %v", p, err)
	}
	l.Close()
	if held, err := Held(p); err != nil || !held {
		t.Fatalf("port %d reserved, yet not held (%v)", p, err)
	}
	for range 2000 {
		q, g, err := Reserve()
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		if q == p {
			t.Fatalf("port %d reserved twice", p)
		}
	}
	f.Close()
	if held, err := Held(p); err != nil || held {
		t.Fatalf("port %d let go, yet held (%v)", p, err)
	}
}
