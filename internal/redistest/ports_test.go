package redistest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/testports"
)

// A stopped server's port stays reserved until the test ends: no other
// reservation gets it, in this process or another (the flock), and it
// refuses connections.
func TestStoppedPortStaysReserved(t *testing.T) {
	if _, _, ok := testports.Range(); !ok {
		t.Skip("no room below the ephemeral port range: ports are the kernel's choice")
	}
	s := Start(t)
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	f, err := os.Open(filepath.Join(testports.Dir(), port))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatalf("port %s of a stopped server could be reserved again", port)
	}
	if c, err := net.Dial("tcp", s.Addr); err == nil {
		c.Close()
		t.Fatalf("a stopped server's %s accepts connections", s.Addr)
	}
	a := RefusedAddr(t)
	if c, err := net.Dial("tcp", a); err == nil {
		c.Close()
		t.Fatalf("RefusedAddr %s accepts connections", a)
	}
	lo, hi, _ := testports.Range()
	_, p, _ := net.SplitHostPort(a)
	if n, _ := strconv.Atoi(p); n < lo || n >= hi {
		t.Fatalf("RefusedAddr %s outside %d-%d", a, lo, hi-1)
	}
}
