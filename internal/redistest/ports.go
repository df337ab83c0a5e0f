package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A server's port is reserved for the whole test, stopped or not: a test
// that stops a server counts on its address refusing connections, and a
// port the kernel handed out (bind to port 0) and let go is the kernel's
// to hand out again, to another test binary's server or listener or to a
// client's connection. So ports are chosen below the kernel's ephemeral
// range, where it hands out none, and each is held by an exclusive flock
// on a file named for it, which the test binaries running side by side
// under `go test ./...` respect, until the test ends (or its process
// does: the kernel drops the lock).

// portSpan is how many ports below the ephemeral range are ours.
const portSpan = 10000

// reservedRange returns the ports reservePort chooses from, [lo, hi), or
// ok false when the ephemeral range is unknown or too low to leave room.
func reservedRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low-portSpan < 1024 {
		return 0, 0, false
	}
	return low - portSpan, low, true
}

// reservePort returns a loopback TCP port that is free and reserved for
// the caller until it closes the returned file (nil when the port could
// only be chosen by the kernel, unreserved).
func reservePort() (int, *os.File, error) {
	lo, hi, ok := reservedRange()
	if !ok {
		p, err := freePort()
		return p, nil, err
	}
	dir := portsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, err
	}
	var openErr error
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			openErr = err
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another server's, in this process or another
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // something else listens there
			continue
		}
		l.Close()
		return p, f, nil
	}
	return 0, nil, fmt.Errorf("no free port in %d-%d (last error opening a reservation: %v)", lo, hi-1, openErr)
}

// portsDir is where the reservations are: one directory per user, whose
// test binaries reserve ports from one another.
func portsDir() string {
	return filepath.Join(os.TempDir(), "redistest-ports-"+strconv.Itoa(os.Getuid()))
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

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
	p, f, err := reservePort()
	if err != nil {
		tb.Fatal(err)
	}
	if f != nil {
		tb.Cleanup(func() { f.Close() })
	}
	return p
}
