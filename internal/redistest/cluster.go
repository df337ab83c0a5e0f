package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

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
		cl.Servers = append(cl.Servers, newClusterNode(tb, nodeDir))
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

	waitReply(tb, cl.Addrs, "cluster_state:ok", "CLUSTER", "INFO")
	return cl
}

// newClusterNode returns a cluster-enabled node, not started, in dir, that
// is stopped when the test ends.
func newClusterNode(tb testing.TB, dir string) *Server {
	s := newServer(tb, dir, []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", "2000",
	})
	s.cluster = true
	tb.Cleanup(s.Stop)
	return s
}

// StartLoneNode starts a cluster-enabled redis-server that is in no
// cluster, as is a node that `redis-cli --cluster del-node` removed and
// left running: it answers CLUSTER SLOTS with an empty map.
func StartLoneNode(tb testing.TB) *Server {
	tb.Helper()
	need(tb, "redis-server")
	s := newClusterNode(tb, tb.TempDir())
	if err := s.start(); err != nil {
		tb.Fatalf("redistest: lone cluster node: %v", err)
	}
	return s
}

// Stop stops every node of the cluster.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
}
