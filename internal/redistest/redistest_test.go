package redistest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStartRestart(t *testing.T) {
	s := Start(t)
	if r, err := Do(s.Addr, "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET: %q %v", r, err)
	}
	addr := s.Addr
	s.Restart()
	if s.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	if r, err := Do(s.Addr, "GET", "k"); err != nil || r != "" {
		t.Fatalf("GET after restart: %q %v (want empty: no persistence)", r, err)
	}
	s.Stop()
	if _, err := Do(s.Addr, "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart()
	if r, err := Do(s.Addr, "PING"); err != nil || r != "PONG" {
		t.Fatalf("PING after Stop+Restart: %q %v", r, err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause()
	start := time.Now()
	if _, err := do(s.Addr, 300*time.Millisecond, "PING"); err == nil {
		t.Fatal("a paused server answered")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("a paused server failed fast (%v): it should hang", d)
	}
	s.Resume()
	if r, err := Do(s.Addr, "PING"); err != nil || r != "PONG" {
		t.Fatalf("after Resume: %q %v", r, err)
	}
	s.Pause() // Stop (at cleanup) must kill a paused server too
}

func TestStartCluster(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 3, 1)
	t.Logf("6-node cluster up in %v", time.Since(start))
	if len(c.Addrs) != 6 {
		t.Fatalf("got %d nodes", len(c.Addrs))
	}
	masters := 0
	for _, a := range c.Addrs {
		info, err := Do(a, "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "role:master") {
			masters++
		}
	}
	if masters != 3 {
		t.Fatalf("%d masters, want 3", masters)
	}
}

// TestMissingRedis: without redis-server on PATH a test skips, and with
// CI=true it fails (run in a child process, since failing is the point).
func TestMissingRedis(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		Start(t)
		t.Log("started") // not reached
		return
	}
	for _, ci := range []string{"", "true"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingRedis$", "-test.v")
		cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "PATH="+t.TempDir(), "CI="+ci)
		out, err := cmd.CombinedOutput()
		switch {
		case ci == "" && (err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "redis-server not found")):
			t.Errorf("without CI: want a skip naming redis-server, got %v:\n%s", err, out)
		case ci == "true" && (err == nil || !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "CI=true")):
			t.Errorf("with CI=true: want a failure, got %v:\n%s", err, out)
		}
	}
}

// TestStartClusterWithoutClusterPort starts a cluster the way it is started
// on Redis 6 (no cluster-port: each node's port+10000 must be free).
func TestStartClusterWithoutClusterPort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	need(t, "redis-server")
	clusterPortOption() // run the Once
	saved := redisMajor
	redisMajor = 6
	defer func() { redisMajor = saved }()
	c := StartCluster(t, 3, 1)
	for _, s := range c.Servers {
		if s.busPort != 0 || s.port+10000 > 65535 {
			t.Fatalf("node %s: bus port %d", s.Addr, s.busPort)
		}
	}
}

func TestStartSentinel(t *testing.T) {
	st := StartSentinel(t, 1, 1)
	if _, err := Do(st.Master.Addr, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	// The replica receives it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, err := Do(st.Replicas[0].Addr, "GET", "k"); err == nil && v == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never got the write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r, err := Do(st.SentinelAddrs[0], "PING"); err != nil || r != "PONG" {
		t.Fatalf("sentinel PING: %q %v", r, err)
	}
}
