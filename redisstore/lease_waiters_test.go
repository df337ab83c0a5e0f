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

// gateHook is a go-redis hook that fails every pipeline without sending
// it, the first one only once release is closed (a call in flight on a
// Redis that does not answer), and counts them.
type gateHook struct {
	redistest.NopHook
	release chan struct{}
	calls   atomic.Int64
}

func (h *gateHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.calls.Add(1) == 1 {
			<-h.release
		}
		for _, cmd := range cmds {
			cmd.SetErr(errGate)
		}
		return errGate
	}
}

// TestLeaseWaitersShareFailure: the Takes of a key that wait for its call
// in flight fail with that call's failure, instead of each calling Redis
// in turn (the last of n waiters would wait for n timeouts): one call for
// all of them, and a Take waits for at most the call ahead of it.
func TestLeaseWaitersShareFailure(t *testing.T) {
	_, c := newClient(t)
	hook := &gateHook{release: make(chan struct{})}
	c.AddHook(hook)
	l := mustLimiter(t, algorithms.SlidingLog, oneTier(1_000_000, time.Hour))
	s, err := newLeaseStore(c, l, Options{KeyPrefix: "rltest:", Zone: "waiters"}, LeaseOptions{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const key, waiters = "k", 16
	errs := make(chan error, waiters+1)
	var wg sync.WaitGroup
	take := func() {
		_, err := s.Take(ctx, key, time.Time{}, 1)
		errs <- err
	}
	wg.Go(take)
	storetest.WaitFor(t, "the first Take's call", func() bool { return hook.calls.Load() == 1 })
	for range waiters {
		wg.Go(take)
	}
	sh := s.keys.Shard(key)
	storetest.WaitFor(t, "every Take to wait for the call in flight", func() bool {
		sh.Lock()
		defer sh.Unlock()
		ent := sh.Get(key)
		return ent != nil && ent.Value.waiting == waiters
	})
	close(hook.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, errGate) {
			t.Fatalf("a Take answered %v, want the failure of the call it waited for", err)
		}
	}
	if n := hook.calls.Load(); n != 1 {
		t.Fatalf("%d calls to Redis for %d Takes waiting on one failed call, want 1", n, waiters+1)
	}

	// A caller that stops waiting is no failure of Redis: the Takes
	// waiting for its call make their own.
	hook.calls.Store(0)
	hook.release = make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := s.Take(cctx, key, time.Time{}, 1)
		first <- err
	}()
	storetest.WaitFor(t, "the first Take's call", func() bool { return hook.calls.Load() == 1 })
	other := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, key, time.Time{}, 1)
		other <- err
	}()
	storetest.WaitFor(t, "a Take to wait for the call in flight", func() bool {
		sh.Lock()
		defer sh.Unlock()
		return sh.Get(key).Value.waiting == 1
	})
	cancel()
	close(hook.release)
	if err := <-first; !errors.Is(err, context.Canceled) && !errors.Is(err, errGate) {
		t.Fatalf("the cancelled Take: %v", err)
	}
	if err := <-other; !errors.Is(err, errGate) {
		t.Fatalf("the waiting Take: %v, want its own call's failure", err)
	}
	if n := hook.calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2: the waiter calls again after its caller left", n)
	}
}
