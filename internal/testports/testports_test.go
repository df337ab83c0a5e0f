package testports

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
	again, err := os.Open(filepath.Join(Dir(), strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if syscall.Flock(int(again.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		t.Fatalf("port %d reserved, yet its file could be locked again", p)
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
	if err := syscall.Flock(int(again.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("port %d let go, yet its file is still locked: %v", p, err)
	}
}
