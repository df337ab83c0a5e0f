package redisstore

// Slot migrations and failovers of a real Redis Cluster under concurrent
// decisions: every Take answers (a decision or an error, within its
// deadline), no key admits more than its limit, and decisions succeed
// again once the slot map settled.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// opsLimit is the limit of every key of these tests, in events per hour:
// the instants never move, so it is also the most a key may ever admit.
const opsLimit = 400

// clusterOpsClient is a Client of a Cluster set up as the handler sets it
// up: one attempt per command, the pipelines on the one pool.
func clusterOpsClient(t *testing.T, cl *redistest.Cluster) *Client {
	t.Helper()
	c := NewClient(&redis.UniversalOptions{
		Addrs:                 cl.Addrs,
		IsClusterMode:         true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            -1,
		DialerRetries:         1,
		PipelinePoolSize:      -1,
		ContextTimeoutEnabled: true,
	}, ClientOptions{KeyPrefix: "rlops:"})
	t.Cleanup(func() { c.Destruct() })
	return c
}

// keysInSlot returns n keys whose hash tag falls in the slot of the key
// first, itself included.
func keysInSlot(first string, n int) (int, []string) {
	slot := int(crc16(first)) % clusterSlots
	keys := []string{first}
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s-%d", first, i)
		if int(crc16(k))%clusterSlots == slot {
			keys = append(keys, k)
		}
	}
	return slot, keys
}

// opsLoad runs Takes of its keys from many goroutines until stopped, and
// counts what they got.
type opsLoad struct {
	keys     []string
	admitted []atomic.Int64
	failed   []atomic.Int64 // errors, by key
	calls    atomic.Int64   // answered, decision or error
	errs     atomic.Int64
	hung     atomic.Int64 // not answered within opsDeadline
	firstErr atomic.Value
	stop     atomic.Bool
	wg       sync.WaitGroup
}

// opsDeadline guards every Take: far beyond the client's timeouts, so that
// only a call that hangs reaches it.
const opsDeadline = 10 * time.Second

func startLoad(take func(ctx context.Context, key string) (algorithms.Decision, error), keys []string, goroutines int) *opsLoad {
	l := &opsLoad{keys: keys, admitted: make([]atomic.Int64, len(keys)), failed: make([]atomic.Int64, len(keys))}
	for g := range goroutines {
		l.wg.Go(func() {
			for i := g; !l.stop.Load(); i++ {
				k := i % len(keys)
				ctx, cancel := context.WithTimeout(context.Background(), opsDeadline)
				d, err := take(ctx, keys[k])
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					l.hung.Add(1)
				case err != nil:
					l.errs.Add(1)
					l.failed[k].Add(1)
					l.firstErr.CompareAndSwap(nil, err)
				case d.Allowed:
					l.admitted[k].Add(1)
				}
				l.calls.Add(1)
			}
		})
	}
	return l
}

// progress waits until the load answered n more calls.
func (l *opsLoad) progress(t *testing.T, n int64) {
	t.Helper()
	from := l.calls.Load()
	storetest.WaitFor(t, "the load to go on", func() bool { return l.calls.Load() >= from+n })
}

func (l *opsLoad) finish() {
	l.stop.Store(true)
	l.wg.Wait()
}

// opsKeys returns the slot of first, 8 keys of that slot (the first
// moved of keys) and 4 keys of other slots of the same master.
func opsKeys(t *testing.T, cl *redistest.Cluster, first string) (slot int, keys []string, moved int) {
	slot, keys = keysInSlot(first, 8)
	moved = len(keys)
	master := redistest.SlotMaster(t, cl.Addrs[0], slot)
	for i := 0; len(keys) < moved+4; i++ {
		k := fmt.Sprintf("other-%s-%d", first, i)
		if s := int(crc16(k)) % clusterSlots; s != slot && redistest.SlotMaster(t, cl.Addrs[0], s) == master {
			keys = append(keys, k)
		}
	}
	return slot, keys, moved
}

// opsScenario takes half the limit of each of 8 keys of the slot of
// first and of 4 keys of other slots of the same master, then runs event
// under the load of 32 goroutines, then checks that decisions succeed
// again within a few attempts and that no key admitted more than its
// limit, whatever the Takes answered meanwhile. A key of another slot is
// never refused by the event: each of its Takes is charged once, so it
// admits its whole limit, less the Takes that failed (a timeout).
func opsScenario(t *testing.T, cl *redistest.Cluster, first string, take func(ctx context.Context, key string) (algorithms.Decision, error), event func(t *testing.T, slot int, step func())) {
	slot, keys, moved := opsKeys(t, cl, first)
	ctx := context.Background()
	pre := make([]int64, len(keys))
	for k, key := range keys {
		for range opsLimit / 2 {
			d, err := take(ctx, key)
			if err != nil {
				t.Fatalf("before: %v", err)
			}
			if d.Allowed {
				pre[k]++
			}
		}
	}
	l := startLoad(take, keys, 32)
	l.progress(t, 200)
	event(t, slot, func() { l.progress(t, 32) })
	l.progress(t, 200)
	l.finish()
	t.Logf("%d calls, %d errors (first: %v), %d hung", l.calls.Load(), l.errs.Load(), l.firstErr.Load(), l.hung.Load())
	if n := l.hung.Load(); n > 0 {
		t.Errorf("%d Takes not answered within %v", n, opsDeadline)
	}
	// Once the slot map settled, a decision succeeds within a few
	// attempts: the first may still go where the slot was.
	attempts := 0
	for {
		attempts++
		if d, err := take(ctx, keys[0]); err == nil {
			if d.Allowed {
				pre[0]++
			}
			break
		} else if attempts == 3 {
			t.Fatalf("no decision after %d attempts: %v", attempts, err)
		}
	}
	for k, key := range keys {
		total := pre[k] + l.admitted[k].Load()
		// Until three denials in a row: each leasing store of three
		// has given out what it held.
		for denied := 0; denied < 3; {
			d, err := take(ctx, key)
			if err != nil {
				t.Fatalf("after: %v", err)
			}
			if !d.Allowed {
				denied++
				continue
			}
			denied = 0
			total++
			if total > opsLimit {
				break
			}
		}
		switch {
		case total > opsLimit:
			t.Errorf("key %s admitted %d or more, limit %d", key, total, opsLimit)
		case k >= moved && total+l.failed[k].Load() < opsLimit:
			t.Errorf("key %s of another slot admitted %d of %d with %d errors: Takes charged more than once", key, total, opsLimit, l.failed[k].Load())
		case total < opsLimit:
			t.Logf("key %s admitted %d of %d (%d errors)", key, total, opsLimit, l.failed[k].Load())
		}
	}
}

// migrate moves the slot to another master a key at a time, calling step
// after each, then finishes the move.
func migrate(cl *redistest.Cluster) func(t *testing.T, slot int, step func()) {
	return func(t *testing.T, slot int, step func()) {
		m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
		for m.Move(1) > 0 {
			step()
		}
		step()
		m.Finish()
	}
}

// failover fails the slot's master over to its replica, calling step
// before and after.
func failover(cl *redistest.Cluster) func(t *testing.T, slot int, step func()) {
	return func(t *testing.T, slot int, step func()) {
		master := redistest.SlotMaster(t, cl.Addrs[0], slot)
		step()
		cl.Failover(t, redistest.ReplicaOf(t, master))
		step()
	}
}

// TestClusterOpsStrict: the strict store through a slot migration and a
// failover, for gcra, sliding_log and fixed_window.
func TestClusterOpsStrict(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := clusterOpsClient(t, cl)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: opsLimit, Window: time.Hour}}}
	for _, alg := range []string{algorithms.GCRA, algorithms.SlidingLog, algorithms.FixedWindow} {
		s, err := NewStore(c, mustLimiter(t, alg, cfg), Options{KeyPrefix: "rlops:", Zone: alg, Pipeliner: c.Pipeliner()})
		if err != nil {
			t.Fatal(err)
		}
		take := func(ctx context.Context, key string) (algorithms.Decision, error) {
			return s.Take(ctx, key, t0, 1)
		}
		t.Run(alg+"/migrate", func(t *testing.T) { opsScenario(t, cl, "mig-"+alg, take, migrate(cl)) })
		t.Run(alg+"/failover", func(t *testing.T) { opsScenario(t, cl, "fo-"+alg, take, failover(cl)) })
	}
}

// TestClusterOpsLease: three leasing stores through a slot migration and
// a failover: together they never admit more than the limit.
func TestClusterOpsLease(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := clusterOpsClient(t, cl)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: opsLimit, Window: time.Hour}}}
	clk := storetest.NewClock(t0)
	for _, alg := range []string{algorithms.GCRA, algorithms.SlidingLog, algorithms.FixedWindow} {
		var stores []*LeaseStore
		for range 3 {
			s, err := NewLeaseStore(c, mustLimiter(t, alg, cfg), Options{KeyPrefix: "rlops:", Zone: "lease-" + alg, Pipeliner: c.Pipeliner()},
				LeaseOptions{Duration: time.Hour, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
		}
		var n atomic.Int64
		take := func(ctx context.Context, key string) (algorithms.Decision, error) {
			return stores[n.Add(1)%3].Take(ctx, key, t0, 1)
		}
		t.Run(alg+"/migrate", func(t *testing.T) { opsScenario(t, cl, "lmig-"+alg, take, migrate(cl)) })
		t.Run(alg+"/failover", func(t *testing.T) { opsScenario(t, cl, "lfo-"+alg, take, failover(cl)) })
	}
}

// TestClusterOpsSync: the two-layer store's syncs through a slot
// migration and a failover under concurrent Takes: the syncs that fail
// are made good by the next ones, and once the slot map settled Redis
// holds exactly what was admitted, each unit counted once.
func TestClusterOpsSync(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := clusterOpsClient(t, cl)
	ctx := context.Background()
	clk := new(storetest.Clock)
	base := alignedAfter(t0, time.Hour)
	clk.Set(base)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 1_000_000, Window: time.Hour}}}
	for name, event := range map[string]func(t *testing.T, slot int, step func()){"migrate": migrate(cl), "failover": failover(cl)} {
		t.Run(name, func(t *testing.T) {
			s := newTestSync(t, c, algorithms.SlidingWindow, cfg, time.Second, clk, "sync-"+name)
			slot, keys, _ := opsKeys(t, cl, "sync-"+name)
			l := startLoad(func(ctx context.Context, key string) (algorithms.Decision, error) {
				return s.Take(ctx, key, base, 1)
			}, keys, 32)
			syncs, failed := 0, 0
			syncing := func() {
				syncs++
				if s.Sync(ctx) != nil {
					failed++
				}
			}
			l.progress(t, 200)
			syncing()
			event(t, slot, func() { l.progress(t, 32); syncing() })
			l.progress(t, 200)
			syncing()
			l.finish()
			attempts := 1
			for ; s.Sync(ctx) != nil; attempts++ {
				if attempts == 3 {
					t.Fatalf("no sync succeeded after %d attempts", attempts)
				}
			}
			mustSync(t, ctx, s)
			t.Logf("%d Takes, %d of %d syncs failed under load", l.calls.Load(), failed, syncs)
			for k, key := range keys {
				if got, want := redisInt(t, c.UniversalClient, s.counterKey(key, 0, base)), l.admitted[k].Load(); got != want {
					t.Errorf("key %s: %d in Redis, %d admitted", key, got, want)
				}
			}
		})
	}
}

// finishOnTryAgain is a go-redis hook that finishes a migration when a
// pipeline gets its first TRYAGAIN: the call refused is sent again after
// the slot moved.
type finishOnTryAgain struct {
	redistest.NopHook
	m        *redistest.Migration
	tryAgain atomic.Int64
}

func (h *finishOnTryAgain) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && redis.HasErrorPrefix(e, "TRYAGAIN") && h.tryAgain.Add(1) == 1 {
				h.m.Finish()
			}
		}
		return err
	}
}

// TestClusterTryAgainSentAgain: a Take refused with TRYAGAIN (its state
// moved, its block key not, as every key that is not blocked) is sent
// again and decided once the slot moved, with its count moved along.
func TestClusterTryAgainSentAgain(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := clusterOpsClient(t, cl)
	ctx := context.Background()
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: time.Hour}}}
	s, err := NewStore(c, mustLimiter(t, algorithms.GCRA, cfg), Options{KeyPrefix: "rlops:", Zone: "z", Pipeliner: c.Pipeliner()})
	if err != nil {
		t.Fatal(err)
	}
	const key = "tryagain"
	for range 2 {
		if d, err := s.Take(ctx, key, t0, 1); err != nil || !d.Allowed {
			t.Fatalf("before the move: %+v, %v", d, err)
		}
	}
	slot := int(crc16(key)) % clusterSlots
	h := &finishOnTryAgain{m: cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))}
	for h.m.Move(10) > 0 {
	}
	c.AddHook(h)
	d, err := s.Take(ctx, key, t0, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("during the move: %+v, %v", d, err)
	}
	if h.tryAgain.Load() == 0 {
		t.Fatal("no TRYAGAIN: the test proves nothing")
	}
	if d, err := s.Take(ctx, key, t0, 1); err != nil || d.Allowed {
		t.Fatalf("the 4th of a limit of 3: %+v, %v", d, err)
	}
}

// TestClusterOpsKilledMaster: the master of the keys' slot is killed under
// load and its replica takes over (cluster-node-timeout later). Every Take
// answers within its deadline, and decisions succeed again once the
// replica took over. Writes the master acknowledged but had not yet sent
// to its replica are lost with it (Redis replicates asynchronously): what
// the keys admitted beyond their limit is logged, not asserted.
func TestClusterOpsKilledMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := clusterOpsClient(t, cl)
	cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: opsLimit, Window: time.Hour}}}
	s, err := NewStore(c, mustLimiter(t, algorithms.GCRA, cfg), Options{KeyPrefix: "rlops:", Zone: "kill", Pipeliner: c.Pipeliner()})
	if err != nil {
		t.Fatal(err)
	}
	slot, keys, _ := opsKeys(t, cl, "kill")
	l := startLoad(func(ctx context.Context, key string) (algorithms.Decision, error) {
		return s.Take(ctx, key, t0, 1)
	}, keys, 32)
	cl.WaitSynced(t)
	l.progress(t, 200)
	master := redistest.SlotMaster(t, cl.Addrs[0], slot)
	replica := redistest.ReplicaOf(t, master)
	for _, srv := range cl.Servers {
		if srv.Addr == master {
			srv.Stop()
		}
	}
	cl.WaitMaster(t, replica)
	// go-redis learns the new master when a call fails or the breaker's
	// probe reloads the slot map: a few Takes, then decisions again.
	attempts := 0
	storetest.WaitFor(t, "a decision after the failover", func() bool {
		attempts++
		_, err := s.Take(context.Background(), keys[0], t0, 1)
		return err == nil
	})
	l.progress(t, 200)
	l.finish()
	t.Logf("%d calls, %d errors (first: %v), %d hung; decided again after %d attempts", l.calls.Load(), l.errs.Load(), l.firstErr.Load(), l.hung.Load(), attempts)
	if n := l.hung.Load(); n > 0 {
		t.Errorf("%d Takes not answered within %v", n, opsDeadline)
	}
	for k, key := range keys {
		if n := l.admitted[k].Load(); n > opsLimit {
			t.Logf("key %s admitted %d, limit %d: writes lost with the master", key, n, opsLimit)
		}
	}
}

// TestPipelinerAnswersOtherSlotsFirst: in a batch with a call that a slot
// being moved refuses (TRYAGAIN: one of its keys is on the source, one is
// not), the calls to other slots are answered at once; the refused call is
// sent again in the background and answered once its tries are over.
func TestPipelinerAnswersOtherSlotsFirst(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := clusterOpsClient(t, cl)
	ctx := context.Background()
	moving := "rlops:{moving}:a"
	slot := int(crc16("moving")) % clusterSlots
	if int(crc16("other"))%clusterSlots == slot {
		t.Fatal("the two hash tags share a slot: the test proves nothing")
	}
	if err := c.Set(ctx, moving, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	m := cl.BeginMigration(t, slot, cl.OtherMaster(t, slot))
	script := redis.NewScript(`return redis.call('EXISTS', KEYS[1]) + redis.call('EXISTS', KEYS[2])`)
	call := func(keys ...string) *scriptCall {
		return &scriptCall{evalCall: evalCall{script: script, keys: keys}, done: make(chan struct{}, 1)}
	}
	mv := call(moving, "rlops:{moving}:b")
	ot := call("rlops:{other}:a", "rlops:{other}:b")
	p := &Pipeliner{c: c.UniversalClient}
	_, _, later := p.sendBatch([]*scriptCall{mv, ot}, nil, nil)
	if len(later) != 1 || later[0] != mv {
		t.Fatalf("calls left for the background: %d, want the moving slot's one", len(later))
	}
	if ot.reply.err != nil || ot.reply.n != 1 || ot.reply.vals[0] != 0 {
		t.Fatalf("the other slot's call: %+v, want answered (0 keys exist)", ot.reply)
	}
	select {
	case <-ot.done:
		t.Fatal("sendBatch signalled the answered call: that is its worker's to do")
	default:
	}
	select {
	case <-mv.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the moving slot's call never answered")
	}
	if !SlotRefused(mv.reply.err) {
		t.Fatalf("the moving slot's call: %+v, want TRYAGAIN after its tries", mv.reply)
	}
	m.Finish()
}

// A node in no cluster among the addresses (one that del-node removed and
// left running) answers CLUSTER SLOTS with no slot: a client must take its
// slot map from another node, never send keys to a node at random.
func TestClusterNodeWithoutSlotsIgnored(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	lone := redistest.StartLoneNode(t)
	seeds := &redistest.Cluster{Addrs: append([]string{lone.Addr}, cl.Addrs...)}
	ctx := context.Background()
	// Each new client loads its slot map from an address taken at random:
	// without the fix, one in four takes the lone node's, and then about
	// one key in four goes to it.
	for i := range 40 {
		c := clusterOpsClient(t, seeds)
		for _, slot := range []int{0, 8000, 16000} {
			if err := c.Set(ctx, fmt.Sprintf("rlops:{%s}lone", slotTag(slot)), i, time.Minute).Err(); err != nil {
				t.Fatalf("client %d, slot %d: %v", i, slot, err)
			}
		}
	}
}
