// Package testports reserves loopback TCP ports for tests that start
// servers: the Redis servers of package redistest, the in-process Caddy of
// package caddytesting.
//
// A port the kernel handed out (bind to port 0) and that was let go is the
// kernel's to hand out again: to another test binary's server or listener
// (`go test ./...` runs packages side by side) or to a client's
// connection. A test that stops a server counts on its address refusing
// connections, and one that picks ports before it binds them on the ports
// staying free. So Reserve chooses ports below the kernel's ephemeral
// range, where it hands out none, and holds each by an exclusive flock on
// a file named for it ($TMPDIR/testports-<uid>/<port>), which every test
// binary using this package respects, until the file is closed or the
// process ends (the kernel drops the lock). The files stay, empty.
package testports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// span is how many ports below the ephemeral range are Reserve's.
const span = 10000

// Range returns the ports Reserve chooses from, [lo, hi), or ok false when
// the ephemeral range is unknown or too low to leave room below it.
func Range() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low-span < 1024 {
		return 0, 0, false
	}
	return low - span, low, true
}

// Reserve returns a loopback TCP port that is free and reserved for the
// caller until it closes the returned file (nil when Range has no room:
// then the port is the kernel's choice, unreserved).
func Reserve() (int, *os.File, error) {
	lo, hi, ok := Range()
	if !ok {
		p, err := kernelPort()
		return p, nil, err
	}
	dir := Dir()
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
			f.Close() // reserved by another, in this process or another
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
	return 0, nil, fmt.Errorf("testports: no free port in %d-%d (last error opening a reservation: %v)", lo, hi-1, openErr)
}

// Dir is where the reservations are: one directory per user, whose test
// binaries reserve ports from one another.
func Dir() string {
	return filepath.Join(os.TempDir(), "testports-"+strconv.Itoa(os.Getuid()))
}

// kernelPort returns a loopback TCP port that was free a moment ago.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Held reports whether port p is reserved (by this process or another).
func Held(p int) (bool, error) {
	f, err := os.Open(filepath.Join(Dir(), strconv.Itoa(p)))
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true, nil
	}
	return false, nil // the lock goes with f
}
