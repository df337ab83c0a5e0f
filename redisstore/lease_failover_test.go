package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// TestLeaseClusterMasterKilled: 16 goroutines take one key of a leasing
// store on a Redis Cluster whose master of the key's slot is killed
// (SIGKILL) until its replica takes over. While it is down no Take waits
// for more than one or two of the key's failed script calls (one in
// flight at a time: Takes that waited on each failed call in turn would
// see a dozen), and once the replica serves the slot the key's Takes
// succeed again.
func TestLeaseClusterMasterKilled(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	cl.WaitSynced(t)
	c := clusterOpsClient(t, cl)
	calls := &unansweredCalls{}
	c.AddHook(calls)
	l := mustLimiter(t, algorithms.SlidingLog, oneTier(1_000_000_000, time.Hour))
	s, err := newLeaseStore(c, l, Options{KeyPrefix: "rlfail:", Zone: "lease", Pipeliner: c.Pipeliner()}, LeaseOptions{Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const key = "k"
	slot := int(c.ClusterKeySlot(ctx, s.Keys(key)[0]).Val())
	master := redistest.SlotMaster(t, cl.Addrs[0], slot)
	replica := redistest.ReplicaOf(t, master)

	var (
		stop, killed     atomic.Bool
		takes, failures  atomic.Int64
		widest, admitted atomic.Int64 // most unanswered calls during one Take; admissions
		firstErr         atomic.Value
		wg               sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), opsDeadline)
				before := calls.Load()
				d, err := s.Take(ctx, key, time.Time{}, 1)
				spanned := calls.Load() - before
				cancel()
				if killed.Load() {
					for w := widest.Load(); spanned > w && !widest.CompareAndSwap(w, spanned); w = widest.Load() {
					}
				}
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					t.Errorf("a Take hung for %v", opsDeadline)
				case err != nil:
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case d.Allowed:
					admitted.Add(1)
				}
				takes.Add(1)
			}
		})
	}
	progress := func(what string) {
		from := takes.Load()
		storetest.WaitFor(t, what, func() bool { return takes.Load() >= from+100 })
	}
	progress("the Takes to go on")
	if failures.Load() != 0 {
		t.Fatalf("Takes failed before the kill: %v", firstErr.Load())
	}
	killed.Store(true)
	for _, srv := range cl.Servers {
		if srv.Addr == master {
			srv.Stop()
		}
	}
	storetest.WaitFor(t, "a Take to fail on the dead master", func() bool { return failures.Load() > 0 })
	cl.WaitMaster(t, replica)
	// The leases granted before the kill ended seconds ago: what is
	// admitted from now on was leased by the new master.
	from := admitted.Load()
	storetest.WaitFor(t, "the Takes to be admitted again", func() bool { return admitted.Load() >= from+100 })
	stop.Store(true)
	wg.Wait()
	t.Logf("%d Takes, %d admitted, %d failed (%v); at most %d unanswered script calls during one Take",
		takes.Load(), admitted.Load(), failures.Load(), firstErr.Load(), widest.Load())
	// A Take fails with the call it waits for, or its own; or both, if it
	// began just before the one ahead failed.
	if w := widest.Load(); w > 3 {
		t.Fatalf("a Take waited for %d unanswered script calls of its key while the master was down: Takes waited for failed calls in turn", w)
	}
}

// unansweredCalls is a go-redis hook that counts the script calls that
// Redis did not answer (see noAnswer), as their pipelines return.
type unansweredCalls struct{ n atomic.Int64 }

func (h *unansweredCalls) Load() int64 { return h.n.Load() }

func (h *unansweredCalls) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *unansweredCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *unansweredCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if n := cmd.Name(); (n == "evalsha" || n == "eval") && noAnswer(cmd.Err()) {
				h.n.Add(1)
			}
		}
		return err
	}
}
