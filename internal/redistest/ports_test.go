package redistest

import (
	"net"
	"strconv"
	"testing"

	"github.com/zonelimit/caddy-ratelimit/internal/testports"
)

// A stopped server's port stays reserved until the test ends, and refuses
// connections; so does RefusedAddr's.
func TestStoppedPortStaysReserved(t *testing.T) {
	if _, _, ok := testports.Range(); !ok {
		t.Skip("no room below the ephemeral port range: ports are the kernel's choice")
	}
	s := Start(t)
	s.Stop()
	for _, addr := range []string{s.Addr, RefusedAddr(t)} {
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if held, err := testports.Held(p); err != nil || !held {
			t.Fatalf("%s not reserved (%v)", addr, err)
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatalf("%s accepts connections", addr)
		}
	}
}
