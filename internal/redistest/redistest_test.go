package redistest

import (
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
