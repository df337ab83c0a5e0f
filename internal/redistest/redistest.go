// Package redistest starts real redis-server processes for tests: a single
// server (Start) or a Redis Cluster with replicas (StartCluster), each on
// free loopback ports, without persistence, in a temporary directory, and
// stops them when the test ends.
//
// A server's ports stay reserved until the test ends, stopped or not (see
// package testports): a stopped server's address refuses connections.
//
// When redis-server (or redis-cli, for a cluster) is not on PATH the test is
// skipped with a message saying so, except when the environment variable CI
// is "true": then the test fails, so that a CI run never skips the Redis
// tests silently. Install them with `apt-get install redis-server
// redis-tools` (Debian).
package redistest

import (
	"errors"
	"fmt"
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

// startTimeout bounds how long a server may take to answer PING, and a
// cluster to reach cluster_state:ok.
const startTimeout = 15 * time.Second

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	// Addr is host:port of the server; it stays the same across Restart.
	Addr string

	tb      testing.TB
	dir     string
	port    int
	busPort int  // cluster bus port (cluster nodes only)
	cluster bool // cluster-enabled: also choose a bus port
	args    []string

	sentinelMaster string // sentinel: the master name it monitors
	sentinelAddr   string // sentinel: the master's host:port

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	logf *os.File
}

// need fails or skips tb when the binary name is not on PATH and returns
// its path.
func need(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("redistest: %s not found on PATH (install Debian packages redis-server and redis-tools: apt-get install -y redis-server redis-tools)", name)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg + "; CI=true, so this test fails instead of skipping")
	}
	tb.Skip(msg)
	return ""
}

// Start starts a redis-server on a free loopback port and stops it when the
// test ends. It skips the test when redis-server is missing (fails with
// CI=true).
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartArgs(tb)
}

func newServer(tb testing.TB, dir string, extra []string) *Server {
	return &Server{tb: tb, dir: dir, args: extra}
}

// start starts the process, choosing a port the first time (retrying with
// another port if the chosen one was taken meanwhile), and waits for PING.
func (s *Server) start() error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if s.Addr == "" { // first start: a fresh port on every attempt
			s.port = testPort(s.tb) // reserved until the test ends
			if s.cluster {
				// The cluster bus listens on its own port: by default
				// port+10000, which may be taken or beyond 65535.
				if clusterPortOption() {
					// Redis 7: choose a free one (cluster-port).
					s.busPort = testPort(s.tb)
				} else if p, err := freePortPair(); err != nil {
					// Older: a port whose port+10000 is free too.
					return err
				} else {
					s.port = p
				}
			}
		}
		if err := s.spawn(); err != nil {
			return err
		}
		if lastErr = s.waitPing(startTimeout); lastErr == nil {
			s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
			return nil
		}
		s.kill()
		if s.Addr != "" { // a restart must keep its port: do not move
			break
		}
	}
	return fmt.Errorf("redis-server on port %d did not start: %v; log:\n%s", s.port, lastErr, s.logTail())
}

func (s *Server) spawn() error {
	var args []string
	if s.sentinelMaster != "" {
		// A sentinel needs a config file it can rewrite.
		conf := filepath.Join(s.dir, fmt.Sprintf("sentinel-%d.conf", s.port))
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
			"sentinel monitor %s %s 1\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			"sentinel failover-timeout %[3]s 3000\n",
			s.port, s.dir, s.sentinelMaster, strings.Replace(s.sentinelAddr, ":", " ", 1))
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		args = []string{conf, "--sentinel", "--loglevel", "warning", "--daemonize", "no"}
	} else {
		args = []string{
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(s.port),
			"--save", "",
			"--appendonly", "no",
			"--dir", s.dir,
			"--daemonize", "no",
			"--protected-mode", "no",
			"--loglevel", "warning",
			"--databases", "16",
		}
	}
	args = append(args, s.args...)
	if s.cluster && s.busPort != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(s.busPort))
	}
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = s.dir
	// Its own process group, so that a signal to the test (Ctrl-C) is not
	// what stops it and Stop can kill it reliably.
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		f.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.logf = cmd, done, f
	s.mu.Unlock()
	return nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port)))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// waitPing waits until the server answers PING with PONG.
func (s *Server) waitPing(timeout time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(timeout)
	delay := 2 * time.Millisecond
	var err error
	for time.Now().Before(deadline) {
		s.mu.Lock()
		done := s.done
		s.mu.Unlock()
		select {
		case <-done:
			return errors.New("redis-server exited")
		default:
		}
		var reply string
		if reply, err = Do(addr, "PING"); err == nil {
			if reply == "PONG" {
				return nil
			}
			err = fmt.Errorf("PING answered %q", reply)
		} else if strings.Contains(err.Error(), "NOAUTH") {
			return nil // up, with a password (StartArgs --requirepass)
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
	return err
}

// waitReply waits until every server of addrs answers the command args
// with a reply that contains want (a cluster, replica or sentinel that is
// up but not ready yet), for startTimeout at the most.
func waitReply(tb testing.TB, addrs []string, want string, args ...string) {
	tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for _, addr := range addrs {
		for {
			reply, err := Do(addr, args...)
			if err == nil && strings.Contains(reply, want) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: %s: %s never answered %q (%v):\n%s", addr, strings.Join(args, " "), want, err, reply)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// kill stops the process (SIGKILL) and waits for it.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Stop kills the server and waits for it to exit. It may be called more
// than once; Restart starts it again on the same port.
func (s *Server) Stop() { s.kill() }

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered (a hung or overloaded Redis, for timeout tests) until
// Resume. Stop and Restart resume it first.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart stops the server (if running) and starts it again on the same
// port with an empty dataset (there is no persistence). It fails the test
// when the server does not come back.
func (s *Server) Restart() {
	s.tb.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// StartArgs starts a redis-server like Start with extra command-line
// arguments (e.g. "--requirepass", "secret").
func StartArgs(tb testing.TB, args ...string) *Server {
	tb.Helper()
	need(tb, "redis-server")
	s := newServer(tb, tb.TempDir(), args)
	tb.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// StartTLS starts a redis-server that also listens with TLS, with the
// certificate and key in the PEM files given (clients need not present a
// certificate), and returns it and the host:port of its TLS listener. Its
// plain port (Addr) stays open for the test's own commands.
func StartTLS(tb testing.TB, certFile, keyFile string) (*Server, string) {
	tb.Helper()
	port := testPort(tb)
	s := StartArgs(tb, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
