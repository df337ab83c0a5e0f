package redistest

import (
	"bufio"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A connect that takes more than a second is no failure of the server: Do
// waits for it as long as for the reply. Here the server's accept queue is
// full, as when a busy server is slow to accept, so that the kernel drops
// the SYNs of Do's connection until the queue drains, after 1.5s; a SYN
// sent again after that gets through.
func TestDoSlowDial(t *testing.T) {
	// A listener with the shortest accept queue: one connection fills it.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		f.Close()
		t.Fatal(err)
	}
	l, err := net.FileListener(f) // a copy of fd
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()

	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	// Connections until one is not accepted by the kernel: the queue is
	// full.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		conns = append(conns, c)
		if i == 10 {
			t.Fatal("the accept queue never filled")
		}
	}

	// Drain the queue after 1.5s and answer every command with PONG.
	drain := time.AfterFunc(1500*time.Millisecond, func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if r.Buffered() == 0 { // the whole command read
						c.Write([]byte("+PONG\r\n"))
					}
				}
			}()
		}
	})
	defer drain.Stop()

	start := time.Now()
	if r, err := Do(addr, "PING"); err != nil || r != "PONG" {
		t.Fatalf("PING after %v: %q %v, want PONG", time.Since(start).Round(time.Millisecond), r, err)
	}
	t.Logf("PONG after %v", time.Since(start).Round(time.Millisecond))
}
