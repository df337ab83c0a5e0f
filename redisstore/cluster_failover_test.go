package redisstore

// Failovers of a real Redis Cluster under the two-layer and the leasing
// stores (a master killed, its replica taking over), and how the
// two-layer store reports syncs that work again.

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

// TestSyncClusterMasterKilled: a two-layer store on a Redis Cluster whose
// master of a key's slot is killed (SIGKILL). Its syncs fail until the
// replica takes over; then a sync succeeds within seconds (go-redis alone
// would keep sending the slot's calls to the dead master until its slot
// map is a minute old), the shared count includes the units counted while
// the master was down, and OnRecover reports the failed syncs once.
func TestSyncClusterMasterKilled(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	cl.WaitSynced(t)
	c := clusterOpsClient(t, cl)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Minute)
	clk.Set(base)
	l := mustLimiter(t, algorithms.SlidingWindow, oneTier(3000, time.Minute))
	var failed, recoveries atomic.Int64
	var reported atomic.Int64 // failed syncs OnRecover reported
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rlfail:", Zone: "sync"}, SyncOptions{
		Interval:  time.Second,
		Now:       clk.Now,
		OnError:   func(error) { failed.Add(1) },
		OnRecover: func(n int) { recoveries.Add(1); reported.Add(int64(n)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	take := func(n int) {
		t.Helper()
		for range n {
			if d, _ := s.Take(ctx, "k", clk.Now(), 1); !d.Allowed {
				t.Fatalf("denied: %+v", d)
			}
		}
	}
	take(5)
	mustSync(t, ctx, s)
	counter := s.counterKey("k", 0, base)
	slot := int(c.ClusterKeySlot(ctx, counter).Val())
	master := redistest.SlotMaster(t, cl.Addrs[0], slot)
	replica := redistest.ReplicaOf(t, master)

	for _, srv := range cl.Servers {
		if srv.Addr == master {
			srv.Stop()
		}
	}
	take(7)
	if err := s.Sync(ctx); err == nil {
		t.Fatal("a sync to the dead master succeeded")
	}
	cl.WaitMaster(t, replica)
	// Each failed sync has the slot map reloaded: the next ones go to the
	// replica that took over.
	storetest.WaitFor(t, "a sync to succeed after the failover", func() bool { return s.Sync(ctx) == nil })
	// The 7 units never reached the dead master: they are in Redis now
	// (the 5 before them, if the replica had them when it took over).
	if got := redisInt(t, c, counter); got != 7 && got != 12 {
		t.Fatalf("Redis holds %d units of the key after the failover, want 7 or 12", got)
	}
	if d, _ := s.Take(ctx, "k", clk.Now(), 0); d.Remaining != 3000-12 && d.Remaining != 3000-7 {
		t.Fatalf("the shared count read back: %+v", d)
	}
	if recoveries.Load() != 1 || reported.Load() != failed.Load() || failed.Load() == 0 {
		t.Fatalf("%d failed syncs; OnRecover called %d times, reporting %d failed", failed.Load(), recoveries.Load(), reported.Load())
	}
}

// errGate is the failure of the test hooks that fail calls unsent: not a
// Redis reply, as a refused connection or a timeout.
var errGate = errors.New("gate: no answer")

// downHook is a go-redis hook that fails every pipeline without sending it
// while down is set.
type downHook struct {
	redistest.NopHook
	down atomic.Bool
}

func (h *downHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.down.Load() {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			cmd.SetErr(errGate)
		}
		return errGate
	}
}

// TestSyncOnRecover: OnRecover is called at the first sync that succeeds
// after failed ones, with their number; a recovery within RecoverEvery of
// the last one reported is reported at the first successful sync after
// it, with the failures since, even one with nothing to push (the keys
// went idle meanwhile); successful syncs alone report nothing.
func TestSyncOnRecover(t *testing.T) {
	_, c := newClient(t)
	hook := &downHook{}
	c.AddHook(hook)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Hour)
	clk.Set(base)
	l := mustLimiter(t, algorithms.FixedWindow, oneTier(1000, time.Hour))
	var reports []int
	s, err := newSyncStore(c, l, Options{KeyPrefix: "rlsync:", Zone: "recover"}, SyncOptions{
		Interval:  time.Second,
		Now:       clk.Now,
		OnRecover: func(n int) { reports = append(reports, n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// step moves the clock to base+at, takes a unit (so that the sync has
	// a call to make) and syncs with Redis up or down.
	step := func(at time.Duration, down bool) {
		t.Helper()
		clk.Set(base.Add(at))
		s.Take(ctx, "k", clk.Now(), 1)
		hook.down.Store(down)
		if err := s.Sync(ctx); (err != nil) != down {
			t.Fatalf("sync at %v, Redis down %v: %v", at, down, err)
		}
	}
	expect := func(want ...int) {
		t.Helper()
		if len(reports) != len(want) {
			t.Fatalf("OnRecover reported %v, want %v", reports, want)
		}
		for i := range want {
			if reports[i] != want[i] {
				t.Fatalf("OnRecover reported %v, want %v", reports, want)
			}
		}
	}
	step(0, false)
	expect()
	step(1*time.Second, true)
	step(2*time.Second, true)
	step(3*time.Second, false)
	expect(2)
	step(4*time.Second, false)
	expect(2)
	step(5*time.Second, true)
	step(6*time.Second, false) // within RecoverEvery of the last report
	step(7*time.Second, true)
	step(8*time.Second, false)
	expect(2)
	// syncs without Takes: the key's last call, then none (it went idle)
	for _, at := range []time.Duration{9 * time.Second, 3*time.Second + RecoverEvery} {
		clk.Set(base.Add(at))
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expect(2, 2)
	step(20*time.Second, false)
	expect(2, 2)
}

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
type unansweredCalls struct {
	redistest.NopHook
	n atomic.Int64
}

func (h *unansweredCalls) Load() int64 { return h.n.Load() }

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
