package redistest

import (
	"strings"
	"testing"
)

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
	var addrs []string
	for _, r := range st.Replicas {
		addrs = append(addrs, r.Addr)
	}
	waitReply(tb, addrs, "master_link_status:up", "INFO", "replication")
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
	waitReply(tb, st.SentinelAddrs, "OK", "SENTINEL", "CKQUORUM", name)
	return st
}
