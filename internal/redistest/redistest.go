// Package redistest starts real redis-server processes for tests: a single
// server (Start) or a Redis Cluster with replicas (StartCluster), each on
// free loopback ports, without persistence, in a temporary directory, and
// stops them when the test ends.
//
// When redis-server (or redis-cli, for a cluster) is not on PATH the test is
// skipped with a message saying so, except when the environment variable CI
// is "true": then the test fails, so that a CI run never skips the Redis
// tests silently. Install them with `apt-get install redis-server
// redis-tools` (Debian).
package redistest

import (
	"bufio"
	"context"
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

// start starts the process, choosing a port the first time (retrying with
// another port if the chosen one was taken meanwhile), and waits for PING.
func (s *Server) start() error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if s.Addr == "" { // first start: a fresh port on every attempt
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
			if s.cluster {
				// The cluster bus listens on its own port: by default
				// port+10000, which may be taken or beyond 65535.
				if clusterPortOption() {
					// Redis 7: choose a free one (cluster-port).
					if s.busPort, err = freePort(); err != nil {
						return err
					}
				} else if s.port, err = freePortPair(); err != nil {
					// Older: a port whose port+10000 is free too.
					return err
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

// Do sends one command in RESP to addr on a new connection and returns the
// reply as text (simple strings, integers and bulk strings as they are; an
// error reply as an error). It is enough for the helpers' own PING, INFO and
// CLUSTER commands, without a client library.
func Do(addr string, args ...string) (string, error) {
	return do(addr, 5*time.Second, args...)
}

func do(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Cluster is a Redis Cluster of redistest Servers.
type Cluster struct {
	// Addrs lists every node, masters first.
	Addrs []string
	// Servers are the nodes, in the order of Addrs.
	Servers []*Server
}

// StartCluster starts masters*(1+replicas) redis-server nodes with
// cluster-enabled, joins them with `redis-cli --cluster create
// --cluster-replicas <replicas>`, waits until every node reports
// cluster_state:ok and stops them all when the test ends. It skips the test
// when redis-server or redis-cli is missing (fails with CI=true).
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	need(tb, "redis-server")
	need(tb, "redis-cli")
	if masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	n := masters * (1 + replicas)
	dir := tb.TempDir()
	cl := &Cluster{}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			tb.Fatal(err)
		}
		s := newServer(tb, nodeDir, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		})
		s.cluster = true
		cl.Servers = append(cl.Servers, s)
		tb.Cleanup(s.Stop)
	}
	for i, s := range cl.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatalf("redistest: cluster node: %v", err)
		}
	}
	for _, s := range cl.Servers {
		cl.Addrs = append(cl.Addrs, s.Addr)
	}

	args := append([]string{"--cluster", "create"}, cl.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	deadline := time.Now().Add(startTimeout)
	for _, addr := range cl.Addrs {
		for {
			info, err := Do(addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: node %s did not reach cluster_state:ok: %v\n%s", addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return cl
}

// Stop stops every node of the cluster.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
}

// Sentinel is a Redis master with replicas watched by Redis Sentinels.
type Sentinel struct {
	// MasterName is the name the sentinels know the master by.
	MasterName string
	// Master and Replicas are the data nodes (after a failover a replica
	// may be the master: ask the sentinels).
	Master   *Server
	Replicas []*Server
	// Sentinels are the sentinel processes; SentinelAddrs their addresses,
	// what a Sentinel client is given.
	Sentinels     []*Server
	SentinelAddrs []string
}

// StartSentinel starts a master, replicas replicas of it and sentinels
// sentinels (quorum 1, down-after 1s) monitoring it under the name
// "mymaster", waits until the replicas are in sync and the sentinels see
// the master, and stops them all when the test ends. It skips the test when
// redis-server is missing (fails with CI=true).
func StartSentinel(tb testing.TB, replicas, sentinels int) *Sentinel {
	tb.Helper()
	need(tb, "redis-server")
	const name = "mymaster"
	st := &Sentinel{MasterName: name}
	st.Master = Start(tb)
	// No 5 s wait before a diskless full sync (the default delay).
	if _, err := Do(st.Master.Addr, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	for i := 0; i < replicas; i++ {
		r := newServer(tb, tb.TempDir(), []string{"--replicaof", "127.0.0.1", st.Master.Addr[strings.LastIndexByte(st.Master.Addr, ':')+1:]})
		tb.Cleanup(r.Stop)
		if err := r.start(); err != nil {
			tb.Fatalf("redistest: replica: %v", err)
		}
		st.Replicas = append(st.Replicas, r)
	}
	deadline := time.Now().Add(startTimeout)
	for _, r := range st.Replicas {
		for {
			info, err := Do(r.Addr, "INFO", "replication")
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: replica %s never synced: %v\n%s", r.Addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := 0; i < sentinels; i++ {
		s := newServer(tb, tb.TempDir(), nil)
		s.sentinelMaster, s.sentinelAddr = name, st.Master.Addr
		tb.Cleanup(s.Stop)
		if err := s.start(); err != nil {
			tb.Fatalf("redistest: sentinel: %v", err)
		}
		st.Sentinels = append(st.Sentinels, s)
		st.SentinelAddrs = append(st.SentinelAddrs, s.Addr)
	}
	for _, s := range st.Sentinels {
		for {
			r, err := Do(s.Addr, "SENTINEL", "CKQUORUM", name)
			if err == nil && strings.HasPrefix(r, "OK") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: sentinel %s: %q %v", s.Addr, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return st
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
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	s := StartArgs(tb, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
