package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterNode is a line of CLUSTER NODES: a node's ID, address, whether
// it is a master, the master it replicates (replicas) and its slot ranges.
type clusterNode struct {
	id, addr, master string
	isMaster         bool
	slots            [][2]int
}

// nodes reads CLUSTER NODES from the node at addr.
func nodes(tb testing.TB, addr string) []clusterNode {
	tb.Helper()
	text, err := Do(addr, "CLUSTER", "NODES")
	if err != nil {
		tb.Fatalf("redistest: %s: CLUSTER NODES: %v", addr, err)
	}
	var ns []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], master: f[3]}
		n.isMaster = strings.Contains(f[2], "master") && !strings.Contains(f[2], "fail")
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated
				continue
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if hi != "" {
				b, _ = strconv.Atoi(hi)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		ns = append(ns, n)
	}
	return ns
}

// SlotMaster returns the address of the master that serves slot, as the
// node at addr sees it and the master itself agrees (startTimeout at
// most: after a failover, a node learns the new master from gossip).
func SlotMaster(tb testing.TB, addr string, slot int) string {
	tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		if owner := slotOwner(tb, addr, slot); owner != "" && slotOwner(tb, owner, slot) == owner {
			return owner
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: no master serves slot %d", addr, slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotOwner returns the master of slot in the CLUSTER NODES of addr, or "".
func slotOwner(tb testing.TB, addr string, slot int) string {
	tb.Helper()
	for _, n := range nodes(tb, addr) {
		for _, r := range n.slots {
			if n.isMaster && slot >= r[0] && slot <= r[1] {
				return n.addr
			}
		}
	}
	return ""
}

// ReplicaOf returns the address of a replica of the master at master,
// waiting (startTimeout at most) until the master lists one: a master
// that just took over learns its replica from gossip.
func ReplicaOf(tb testing.TB, master string) string {
	tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		ns := nodes(tb, master)
		for _, m := range ns {
			if m.addr != master {
				continue
			}
			for _, n := range ns {
				if n.master == m.id && !n.isMaster {
					return n.addr
				}
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: master %s has no replica", master)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OtherMaster returns the address of a master, serving slots, that does
// not serve slot. The masters change with failovers: a test moving a slot
// asks for one instead of taking an address of Addrs.
func (c *Cluster) OtherMaster(tb testing.TB, slot int) string {
	tb.Helper()
	var at string
	for _, s := range c.Servers {
		if s.Running() {
			at = s.Addr
			break
		}
	}
	owner := SlotMaster(tb, at, slot)
	for _, n := range nodes(tb, owner) {
		if n.isMaster && len(n.slots) > 0 && n.addr != owner {
			return n.addr
		}
	}
	tb.Fatalf("redistest: no master besides %s", owner)
	return ""
}

func nodeID(tb testing.TB, addr string) string {
	tb.Helper()
	id, err := Do(addr, "CLUSTER", "MYID")
	if err != nil {
		tb.Fatalf("redistest: %s: CLUSTER MYID: %v", addr, err)
	}
	return id
}

// Migration is a hash slot being moved from one master to another, as
// redis-cli --cluster reshard moves it: the target IMPORTING it and the
// source MIGRATING it, its keys moved with MIGRATE (Move), then the slot
// given to the target (Finish). Between the steps a client sees ASK,
// TRYAGAIN and, once it is done, MOVED.
type Migration struct {
	tb                     testing.TB
	c                      *Cluster
	slot                   int
	from, to, fromID, toID string
}

// BeginMigration starts moving slot from its master to the master at to.
func (c *Cluster) BeginMigration(tb testing.TB, slot int, to string) *Migration {
	tb.Helper()
	from := SlotMaster(tb, to, slot)
	if from == to {
		tb.Fatalf("redistest: slot %d is already on %s", slot, to)
	}
	m := &Migration{tb: tb, c: c, slot: slot, from: from, to: to, fromID: nodeID(tb, from), toID: nodeID(tb, to)}
	s := strconv.Itoa(slot)
	m.must(to, "CLUSTER", "SETSLOT", s, "IMPORTING", m.fromID)
	m.must(from, "CLUSTER", "SETSLOT", s, "MIGRATING", m.toID)
	return m
}

// From and To return the addresses of the source and the target.
func (m *Migration) From() string { return m.from }
func (m *Migration) To() string   { return m.to }

func (m *Migration) must(addr string, args ...string) string {
	m.tb.Helper()
	v, err := Do(addr, args...)
	if err != nil {
		m.tb.Fatalf("redistest: %s: %v: %v", addr, args, err)
	}
	return v
}

// Move moves at most n keys of the slot to the target with one MIGRATE
// and returns how many it moved (0: none was left on the source).
func (m *Migration) Move(n int) int {
	m.tb.Helper()
	keys, err := doList(m.from, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.slot), strconv.Itoa(n))
	if err != nil {
		m.tb.Fatalf("redistest: %s: CLUSTER GETKEYSINSLOT: %v", m.from, err)
	}
	if len(keys) == 0 {
		return 0
	}
	host, port, _ := net.SplitHostPort(m.to)
	args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
	m.must(m.from, args...)
	return len(keys)
}

// Finish moves the keys left and gives the slot to the target: on the
// target first, then the source, then every other master (as redis-cli
// does), so that from then on a client is sent there with MOVED.
func (m *Migration) Finish() {
	m.tb.Helper()
	for m.Move(100) > 0 {
	}
	s := strconv.Itoa(m.slot)
	m.must(m.to, "CLUSTER", "SETSLOT", s, "NODE", m.toID)
	m.must(m.from, "CLUSTER", "SETSLOT", s, "NODE", m.toID)
	for _, n := range nodes(m.tb, m.to) {
		if n.isMaster && len(n.slots) > 0 && n.addr != m.to && n.addr != m.from {
			m.must(n.addr, "CLUSTER", "SETSLOT", s, "NODE", m.toID)
		}
	}
}

// Failover makes the replica at replica take over from its master with
// CLUSTER FAILOVER (a coordinated failover: no write is lost) and waits
// until it serves as master and every node reports cluster_state:ok.
//
// Redis gives a manual failover up after 5 s (CLUSTER_MF_TIMEOUT) when
// the master's offset or the other masters' votes do not come in time, as
// on a loaded machine, and the replica stays one: it is asked again once
// that time has passed, up to failoverTries times.
func (c *Cluster) Failover(tb testing.TB, replica string) {
	tb.Helper()
	var info string
	for range failoverTries {
		if _, err := Do(replica, "CLUSTER", "FAILOVER"); err != nil {
			tb.Fatalf("redistest: %s: CLUSTER FAILOVER: %v", replica, err)
		}
		for end := time.Now().Add(failoverWait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			var err error
			if info, err = Do(replica, "INFO", "replication"); err == nil && strings.Contains(info, "role:master") {
				c.WaitMaster(tb, replica)
				return
			}
		}
	}
	tb.Fatalf("redistest: %s: still a replica after %d CLUSTER FAILOVERs:\n%s", replica, failoverTries, info)
}

// failoverTries and failoverWait: how often Failover asks, and how long
// it waits for each, longer than Redis's manual failover timeout (5 s).
const (
	failoverTries = 4
	failoverWait  = 7 * time.Second
)

// WaitMaster waits until the node at addr reports role:master (a replica
// that took over, by CLUSTER FAILOVER or because its master failed) and
// every running node reports cluster_state:ok.
func (c *Cluster) WaitMaster(tb testing.TB, addr string) {
	tb.Helper()
	waitReply(tb, []string{addr}, "role:master", "INFO", "replication")
	var up []string
	for _, s := range c.Servers {
		if s.Running() {
			up = append(up, s.Addr)
		}
	}
	waitReply(tb, up, "cluster_state:ok", "CLUSTER", "INFO")
}

// WaitSynced waits until every running replica reports its link to its
// master up: a replica syncs first a few seconds after the cluster starts
// (repl-diskless-sync-delay), and a replica that never synced does not
// take over from a master that fails.
func (c *Cluster) WaitSynced(tb testing.TB) {
	tb.Helper()
	var replicas []string
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		if info, err := Do(s.Addr, "INFO", "replication"); err == nil && strings.Contains(info, "role:slave") {
			replicas = append(replicas, s.Addr)
		}
	}
	waitReply(tb, replicas, "master_link_status:up", "INFO", "replication")
}
