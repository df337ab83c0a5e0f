package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// A pipeline whose connection Redis refuses before any command (a wrong
// password) fails its calls with Redis's answer, not with an empty reply.
func TestPipelinerConnectionRefusedAtAuth(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong", MaxRetries: -1})
	defer c.Close()
	p := NewPipeliner(c, 0)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.SlidingLog, oneTier(10, time.Minute), "auth")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := s.Take(ctx, "k", time.Time{}, 1)
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("Take %d with a wrong password: %v, want WRONGPASS", i+1, err)
		}
	}
	err := s.Undo(ctx, "k", time.Time{}, 1, algorithms.Decision{Allowed: true})
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Undo with a wrong password: %v, want WRONGPASS", err)
	}
}

// pipelineCounter counts the script calls go-redis writes in pipelines.
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// With Redis hung, every worker waits for a read timeout; calls queued
// behind them fail once their caller's wait (one round trip's timeouts)
// has passed, and are never sent: a failing Redis costs a call one
// timeout, not one per pipeline ahead of it. Counted, not timed: Redis
// stays hung until every queued caller has given up, so the workers are
// still waiting when the queued calls expire.
func TestPipelinerQueuedCallsNotSentAfterWait(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 3 * time.Second, MaxRetries: -1,
		PoolSize: 2 * pipelineWorkers, ContextTimeoutEnabled: true})
	defer c.Close()
	counter := &pipelineCounter{}
	c.AddHook(counter)
	p := NewPipeliner(c, 100*time.Millisecond)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Minute), "queued")
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil {
		t.Fatalf("Take before the pause: %v", err)
	}
	before := counter.n.Load()

	srv.Pause()
	t.Cleanup(srv.Resume)
	// First wave: one call per worker, each sent (and held by the hung
	// Redis) before the next is made, so that every worker is busy.
	var wg sync.WaitGroup
	for i := 0; i < pipelineWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Take(ctx, "first", time.Time{}, 1)
		}()
		deadline := time.Now().Add(5 * time.Second)
		for counter.n.Load() < before+int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("first wave: call %d not sent", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	sentFirst := counter.n.Load()

	// Second wave, queued behind the busy workers: every call fails with
	// the queue timeout, none is sent.
	const queued = 20
	errs := make([]error, queued)
	var wave sync.WaitGroup
	for i := range errs {
		wave.Add(1)
		go func() {
			defer wave.Done()
			_, errs[i] = s.Take(ctx, "second", time.Time{}, 1)
		}()
	}
	wave.Wait()
	for i, err := range errs {
		if !errors.Is(err, errQueueTimeout) {
			t.Errorf("queued call %d: %v, want the queue timeout", i+1, err)
		}
	}
	wg.Wait() // its callers gave up too; the workers still wait for Redis
	srv.Resume()
	// One more call goes through (the workers are free again), and only
	// it is sent after the first wave.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.Take(ctx, "after", time.Time{}, 1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision 5s after Redis resumed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sent := counter.n.Load() - sentFirst; sent < 1 || sent > 10 {
		t.Errorf("%d calls sent after the first wave, want the few calls after the resume (the %d queued ones were sent too?)", sent, queued)
	}
}
