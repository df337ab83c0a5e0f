package redistest

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/testports"
)

// freePortPair returns a free loopback port p whose p+10000 (the default
// cluster bus port) is free too.
func freePortPair() (int, error) {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			l.Close()
			// Ask for one in the lower range explicitly.
			p = 20000 + int(time.Now().UnixNano()%30000)
			if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
				continue
			}
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		l.Close()
		if err == nil {
			bus.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port pair (p, p+10000) found")
}

var (
	versionOnce sync.Once
	redisMajor  int
)

// clusterPortOption reports whether redis-server knows --cluster-port
// (Redis 7 and later).
func clusterPortOption() bool {
	versionOnce.Do(func() {
		out, err := exec.Command("redis-server", "--version").Output()
		if err != nil {
			return
		}
		// "Redis server v=7.0.15 sha=..."
		if _, v, ok := strings.Cut(string(out), "v="); ok {
			major, _, _ := strings.Cut(v, ".")
			redisMajor, _ = strconv.Atoi(major)
		}
	})
	return redisMajor >= 7
}

// RefusedAddr returns the address of a loopback port that refuses
// connections until the test ends: reserved as a server's port is, so
// that nothing else starts listening there meanwhile.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testPort(tb)))
}

// testPort reserves a free port until the test ends.
func testPort(tb testing.TB) int {
	tb.Helper()
	p, f, err := testports.Reserve()
	if err != nil {
		tb.Fatal(err)
	}
	if f != nil {
		tb.Cleanup(func() { f.Close() })
	}
	return p
}
