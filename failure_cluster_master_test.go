package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest/observer"

	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// clusterLimit is the limit of the zone of the Cluster failure tests.
const clusterLimit = 20

// provisionCluster provisions a handler with one zone keyed by the
// client's address (clusterLimit a hour, on_error closed: a decision
// Redis could not make is a 503) on the Cluster cl.
func provisionCluster(t *testing.T, cl *redistest.Cluster, prefix string) (*Handler, *observer.ObservedLogs) {
	t.Helper()
	return provisionObserved(t, fmt.Sprintf(`{"store":"redis","on_error":"closed","redis":{"addresses":["%s"],"key_prefix":%q},
		"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":%d,"window":"1h"}]}]}`,
		strings.Join(cl.Addrs, `","`), prefix, clusterLimit))
}

// clusterHost is a client address whose keys are in a slot of the master
// at master (as the node at addr sees it) and not in slot not (-1: any).
func clusterHost(t *testing.T, addr, master string, not int, used map[string]bool) (host string, slot int) {
	t.Helper()
	for i := 1; i < 4096; i++ {
		host = "198.51." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250)
		if used[host] {
			continue
		}
		v, err := redistest.Do(addr, "CLUSTER", "KEYSLOT", host)
		if err != nil {
			t.Fatal(err)
		}
		slot, _ = strconv.Atoi(v)
		if slot != not && redistest.SlotMaster(t, addr, slot) == master {
			used[host] = true
			return host, slot
		}
	}
	t.Fatalf("no address with keys on %s", master)
	return "", 0
}

// decidedByRedis reports whether res is a decision Redis made: 200 or 429
// with the zone's headers.
func decidedByRedis(res result) bool {
	code := statusOf(res)
	return (code == 200 || code == 429) && res.hdr.Get("X-RateLimit-Remaining") != ""
}

// countedToLimit serves requests from host until one is denied and fails
// the test unless Redis decided each and admitted exactly clusterLimit of
// them (the first admission may have been made before: admitted).
func countedToLimit(t *testing.T, h *Handler, host string, admitted int) {
	t.Helper()
	for i := 0; i <= clusterLimit; i++ {
		res := serve(h, newReq(host+":1"))
		if !decidedByRedis(res) {
			t.Fatalf("%s, on a healthy master, request %d: status %d (%v), headers %v: not decided by Redis",
				host, admitted+1, statusOf(res), res.err, res.hdr)
		}
		if statusOf(res) == 429 {
			break
		}
		admitted++
	}
	if admitted != clusterLimit {
		t.Fatalf("%s: %d admitted before the first 429, want the limit, %d", host, admitted, clusterLimit)
	}
}

// breakerLines returns the masters named by the log lines of msg.
func breakerLines(logs *observer.ObservedLogs, msg string) []string {
	var masters []string
	for _, e := range logs.FilterMessage(msg).All() {
		m, _ := e.ContextMap()["master"].(string)
		masters = append(masters, m)
	}
	return masters
}

// serverAt returns the node of cl listening at addr.
func serverAt(t *testing.T, cl *redistest.Cluster, addr string) *redistest.Server {
	t.Helper()
	for _, s := range cl.Servers {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("no node at %s", addr)
	return nil
}

// startClusterNoFullCoverage starts a Cluster of 3 masters with a replica
// each, whose nodes serve their slots when another master's have no node
// (cluster-require-full-coverage no), and a handler on it (see
// provisionCluster).
func startClusterNoFullCoverage(t *testing.T, prefix string) (*redistest.Cluster, *Handler, *observer.ObservedLogs) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 1)
	for _, a := range cl.Addrs {
		mustDo(t, a, "CONFIG", "SET", "cluster-require-full-coverage", "no")
	}
	cl.WaitSynced(t)
	h, logs := provisionCluster(t, cl, prefix)
	return cl, h, logs
}

// TestHandlerClusterMasterFailover: a master that fails sends only the
// keys of its slots to on_error. While its replica takes over, a key on
// another master is decided by Redis at every request (no 503 with
// on_error closed) and counted to its limit; the failed master's breaker
// opens, with a line naming it, and closes after the failover, with
// another.
func TestHandlerClusterMasterFailover(t *testing.T) {
	cl, h, logs := startClusterNoFullCoverage(t, "rlfo:")
	seed := cl.Addrs[0]
	masters := cl.Addrs[:3] // StartCluster lists the masters first
	used := map[string]bool{}
	failed := masters[1]
	replica := redistest.ReplicaOf(t, failed)
	hostFailed, _ := clusterHost(t, seed, failed, -1, used)
	hostOK, _ := clusterHost(t, seed, masters[2], -1, used)
	for _, host := range []string{hostFailed, hostOK} {
		if res := serve(h, newReq(host+":1")); !decidedByRedis(res) || statusOf(res) != 200 {
			t.Fatalf("%s before the failure: status %d (%v)", host, statusOf(res), res.err)
		}
	}
	okAdmitted := 1
	serverAt(t, cl, failed).Stop()
	storetest.WaitFor(t, "the breaker of the failed master to open", func() bool {
		serve(h, newReq(hostFailed+":1"))
		return h.rt.redis.BreakerFor(context.Background(), hostFailed).State() == breaker.Open
	})
	// Until the replica took over, the healthy master's key is decided by
	// Redis at every request.
	okDenied := false
	deadline := time.Now().Add(time.Minute)
	for !decidedByRedis(serve(h, newReq(hostFailed+":1"))) {
		res := serve(h, newReq(hostOK+":1"))
		if !decidedByRedis(res) {
			t.Fatalf("%s, on a healthy master, while %s fails over: status %d (%v): not decided by Redis", hostOK, failed, statusOf(res), res.err)
		}
		switch {
		case statusOf(res) == 429:
			okDenied = true
		case okDenied:
			t.Fatalf("%s admitted after a denial", hostOK)
		default:
			okAdmitted++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not decided by Redis after the failover to %s", hostFailed, replica)
		}
	}
	if !okDenied {
		countedToLimit(t, h, hostOK, okAdmitted)
	} else if okAdmitted != clusterLimit {
		t.Fatalf("%s: %d admitted before the first 429, want %d", hostOK, okAdmitted, clusterLimit)
	}
	storetest.WaitFor(t, "a line for the breaker closing", func() bool {
		return len(breakerLines(logs, msgBreakerClosed)) > 0
	})
	if got := breakerLines(logs, msgBreakerOpen); len(got) != 1 || got[0] != failed {
		t.Errorf("breaker open lines for masters %q, want one for %s", got, failed)
	}
	if got := breakerLines(logs, msgBreakerClosed); len(got) != 1 || got[0] != failed {
		t.Errorf("breaker closed lines for masters %q, want one for %s", got, failed)
	}
}

// TestHandlerClusterMasterDead: a master killed with its replica, so that
// its slots have no node: its keys get 503 (on_error closed), at once
// once the breaker of that master opened, while keys on the other
// masters are counted to their limit by Redis.
func TestHandlerClusterMasterDead(t *testing.T) {
	cl, h, logs := startClusterNoFullCoverage(t, "rldead:")
	seed := cl.Addrs[0]
	masters := cl.Addrs[:3]
	used := map[string]bool{}
	dead := masters[2]
	hostDead, _ := clusterHost(t, seed, dead, -1, used)
	if res := serve(h, newReq(hostDead+":1")); !decidedByRedis(res) {
		t.Fatalf("%s before the failure: status %d (%v)", hostDead, statusOf(res), res.err)
	}
	hostA, _ := clusterHost(t, seed, masters[0], -1, used)
	hostB, _ := clusterHost(t, seed, masters[1], -1, used)
	serverAt(t, cl, redistest.ReplicaOf(t, dead)).Stop()
	serverAt(t, cl, dead).Stop()
	storetest.WaitFor(t, "the breaker of the dead master to open", func() bool {
		if code := statusOf(serve(h, newReq(hostDead+":1"))); code != 503 {
			t.Fatalf("%s, its master dead: status %d, want 503 (on_error closed)", hostDead, code)
		}
		return h.rt.redis.BreakerFor(context.Background(), hostDead).State() == breaker.Open
	})
	for _, host := range []string{hostA, hostB} {
		countedToLimit(t, h, host, 0)
		if code := statusOf(serve(h, newReq(hostDead+":1"))); code != 503 {
			t.Fatalf("%s, its master dead: status %d, want 503 (on_error closed)", hostDead, code)
		}
	}
	if !h.rt.redis.Breaker().Allow() {
		t.Error("the client's breaker opened")
	}
	if !h.rt.redis.BreakerOpen() {
		t.Error("BreakerOpen (the breaker_open metric) is false while a master's breaker is open")
	}
	if got := breakerLines(logs, msgBreakerOpen); len(got) != 1 || got[0] != dead {
		t.Errorf("breaker open lines for masters %q, want one for %s", got, dead)
	}
}

// tryAgains is a go-redis hook that counts the script calls Redis refused
// with TRYAGAIN.
type tryAgains struct {
	redistest.NopHook
	n atomic.Int64
}

func (h *tryAgains) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *tryAgains) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *tryAgains) count(cmd redis.Cmder) {
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") {
		h.n.Add(1)
	}
}

// TestHandlerClusterMigratingSlotAlone: while a slot is MIGRATING, Redis
// refuses the decisions of its keys (TRYAGAIN: the key's state is on the
// source, its block key nowhere); that refusal is the slot's, not its
// master's: it opens no breaker (no log line), and a key of another slot
// of the same master, and one of another master, are counted to their
// limit by Redis meanwhile.
func TestHandlerClusterMigratingSlotAlone(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	h, logs := provisionCluster(t, cl, "rlmig:")
	refused := new(tryAgains)
	h.rt.redis.AddHook(refused)
	seed := cl.Addrs[0]
	used := map[string]bool{}
	master := cl.Addrs[0]
	hostMoving, slot := clusterHost(t, seed, master, -1, used)
	hostSame, _ := clusterHost(t, seed, master, slot, used)
	hostOther, _ := clusterHost(t, seed, cl.Addrs[1], slot, used)
	if res := serve(h, newReq(hostMoving+":1")); !decidedByRedis(res) || statusOf(res) != 200 {
		t.Fatalf("%s before the move: status %d (%v)", hostMoving, statusOf(res), res.err)
	}
	m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
	for range 3 * 5 { // three breakers' worth of failures in a row
		if code := statusOf(serve(h, newReq(hostMoving+":1"))); code != 503 {
			t.Fatalf("%s, its slot migrating: status %d, want 503 (on_error closed)", hostMoving, code)
		}
	}
	if refused.n.Load() == 0 {
		t.Fatal("no TRYAGAIN: the test proves nothing")
	}
	countedToLimit(t, h, hostSame, 0)
	countedToLimit(t, h, hostOther, 0)
	if n := logs.FilterMessage(msgBreakerOpen).Len(); n != 0 {
		t.Errorf("%d breaker open lines", n)
	}
	m.Finish()
	storetest.WaitFor(t, "the moved key decided by Redis", func() bool {
		return decidedByRedis(serve(h, newReq(hostMoving+":1")))
	})
}

// An operator's look at, or reset of, a key whose slot is being moved
// waits for the move rather than failing: Redis answers TRYAGAIN while
// the key's state is split between the two masters, and the admin API
// tries again until the move is done.
func TestAdminClusterMigratingSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := testContext(t)
	hs := provisionLoad(t, ctx, nil, fmt.Sprintf(`{"store":"redis","redis":{"addresses":["%s"],"key_prefix":"rladm:"},
		"zones":[{"name":"api","key":"{http.request.remote.host}","limits":[{"events":%d,"window":"1h"}]}]}`,
		strings.Join(cl.Addrs, `","`), clusterLimit))
	a := new(AdminAPI)
	if err := a.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	refused := new(tryAgains)
	hs[0].rt.redis.AddHook(refused)
	host, slot := clusterHost(t, cl.Addrs[0], cl.Addrs[0], -1, map[string]bool{})
	if res := serve(hs[0], newReq(host+":1")); !decidedByRedis(res) {
		t.Fatalf("%s: not decided by Redis (%v)", host, res.err)
	}
	path := "/rate_limit/zones/api/keys/" + host
	for _, method := range []string{"GET", "DELETE"} {
		m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
		if m.Move(1) != 1 { // one of the key's two sliding_log keys
			t.Fatal("no key to move")
		}
		before := refused.n.Load()
		type answer struct {
			code int
			body string
		}
		done := make(chan answer, 1)
		go func() {
			code, body := adminCall(t, a, method, path, "")
			done <- answer{code, body}
		}()
		storetest.WaitFor(t, method+" refused with TRYAGAIN", func() bool { return refused.n.Load() > before })
		m.Finish()
		if got := <-done; got.code != 200 {
			t.Fatalf("%s %s while its slot moved: %d %s, want 200", method, path, got.code, got.body)
		} else if method == "GET" && !strings.Contains(got.body, `"used":1`) {
			t.Errorf("GET %s: %s, want the one request counted", path, got.body)
		}
	}
}
