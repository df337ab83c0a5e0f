package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

func pipelinedStore(t *testing.T, c redis.UniversalClient, p *Pipeliner, name string, cfg algorithms.Config, zone string) *Store {
	t.Helper()
	s, err := NewStore(c, mustLimiter(t, name, cfg), Options{KeyPrefix: "rltest:", Zone: zone, Pipeliner: p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Concurrent Takes through a Pipeliner: coalesced into pipelines, still
// exact (every algorithm admits exactly its limit), one EVALSHA each, and
// the same decisions as unpipelined calls on a timeline.
func TestPipelinerExact(t *testing.T) {
	srv, c := newClient(t)
	p := NewPipeliner(c, 0)
	defer p.Close()
	for _, name := range []string{algorithms.SlidingLog, algorithms.FixedWindow, algorithms.TokenBucket, algorithms.GCRA} {
		s := pipelinedStore(t, c, p, name, oneTier(100, time.Hour), "pipe")
		if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		admitted := takeConcurrently(t, 64, 5, func(int, int) (algorithms.Decision, error) {
			return s.Take(context.Background(), "k", time.Time{}, 1)
		})
		if admitted != 100 {
			t.Errorf("%s: admitted %d of 320, want 100", name, admitted)
		}
		if n := commandStats(t, c)["evalsha"]; n != 320 {
			t.Errorf("%s: %d EVALSHA for 320 Takes", name, n)
		}
	}
}

// A pipelined Take and Undo answer what the unpipelined ones do, with
// either Pipeliner.
func TestPipelinerSameDecisions(t *testing.T) {
	for _, newPipeliner := range []func(redis.UniversalClient, time.Duration) *Pipeliner{NewPipeliner, NewDirectPipeliner} {
		_, c := newClient(t)
		p := newPipeliner(c, 0)
		defer p.Close()
		cfg := algorithms.Config{Tiers: []algorithms.Tier{{Events: 3, Window: time.Second}, {Events: 5, Window: time.Minute}}}
		ctx := context.Background()
		for _, name := range algorithms.Names {
			if name == algorithms.Concurrency {
				cfg = oneTier(3, time.Minute)
			}
			plain := mustStore(t, c, mustLimiter(t, name, cfg), "same-a")
			piped := pipelinedStore(t, c, p, name, cfg, "same-b")
			for i := 0; i < 8; i++ {
				now := t0.Add(time.Duration(i) * 150 * time.Millisecond)
				a, err1 := plain.Take(ctx, "k", now, 1)
				b, err2 := piped.Take(ctx, "k", now, 1)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if i%3 == 1 { // give one back now and then
					if err1, err2 = plain.Undo(ctx, "k", now, 1, a), piped.Undo(ctx, "k", now, 1, b); err1 != nil || err2 != nil {
						t.Fatalf("%s step %d: undo: %v, %v", name, i, err1, err2)
					}
				}
				a.Token, b.Token = 0, 0 // concurrency tokens are per store
				if a != b {
					t.Fatalf("%s step %d: plain %+v, pipelined %+v", name, i, a, b)
				}
			}
		}
	}
}

// After a restart Redis has no scripts: the pipeline's EVALSHA gets
// NOSCRIPT and the calls are sent again with EVAL. Close fails later calls.
func TestPipelinerNoScriptAndClose(t *testing.T) {
	srv, c := newClient(t)
	p := NewPipeliner(c, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "noscript")
	if _, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Take(context.Background(), "k", time.Time{}, 1)
	if err != nil || !d.Allowed || d.Remaining != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
	}
	p.Close()
	if _, err := s.Take(context.Background(), "k", time.Time{}, 1); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	p.Close() // twice is fine
}

// A request whose context has a deadline does not wait for its pipeline
// beyond it, with either Pipeliner.
func TestPipelinerContext(t *testing.T) {
	for _, newPipeliner := range []func(redis.UniversalClient, time.Duration) *Pipeliner{NewPipeliner, NewDirectPipeliner} {
		srv, c := newClient(t)
		p := newPipeliner(c, 0)
		defer p.Close()
		s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "ctx")
		srv.Pause()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := s.Take(ctx, "k", time.Time{}, 1)
		cancel()
		srv.Resume()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("paused Redis: %v, want the context's deadline", err)
		}
	}
}

func BenchmarkRedisTakePipelined(b *testing.B) {
	_, c := newClient(b)
	p := NewPipeliner(c, 0)
	defer p.Close()
	s, err := NewStore(c, mustLimiter(b, algorithms.GCRA, oneTier(1<<40, time.Second)), Options{KeyPrefix: "rlbench:", Zone: "p", Pipeliner: p})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Take(context.Background(), "k", time.Time{}, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A pipeline whose connection Redis refuses before any command (a wrong
// password) fails its calls with Redis's answer, not with an empty reply.
func TestPipelinerConnectionRefusedAtAuth(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong", MaxRetries: -1})
	defer c.Close()
	p := NewPipeliner(c, 0)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.SlidingLog, oneTier(10, time.Hour), "auth")
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

// With Redis hung, every worker waits for a read timeout; calls queued
// behind them fail once their caller's wait (one round trip's timeouts)
// has passed, and are never sent: a failing Redis costs a call one
// timeout, not one per pipeline ahead of it. Counted, not timed: Redis
// stays hung until every queued caller has given up, so the workers are
// still waiting when the queued calls expire.
func TestPipelinerQueuedCallsNotSentAfterWait(t *testing.T) {
	srv := redistest.Start(t)
	// The workers' calls must stay held until the second wave gave up,
	// however slowly the test runs: the read timeout is longer than the
	// test (Resume answers them).
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, MaxRetries: -1,
		PoolSize: 2 * pipelineWorkers, ContextTimeoutEnabled: true})
	defer c.Close()
	counter := &countHook{}
	c.AddHook(counter)
	p := NewPipeliner(c, 100*time.Millisecond)
	defer p.Close()
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(10, time.Hour), "queued")
	ctx := context.Background()
	if _, err := s.Take(ctx, "warm", time.Time{}, 1); err != nil {
		t.Fatalf("Take before the pause: %v", err)
	}
	before := counter.piped.Load()

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
		storetest.WaitFor(t, fmt.Sprintf("the first wave's call %d sent", i+1), func() bool {
			return counter.piped.Load() >= before+int64(i+1)
		})
	}
	sentFirst := counter.piped.Load()

	// Second wave, queued behind the busy workers: every call fails with
	// the queue timeout, none is sent.
	const queued = 20
	errs := takeAll(ctx, s, "second", queued)()
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
	if sent := counter.piped.Load() - sentFirst; sent < 1 || sent > 10 {
		t.Errorf("%d calls sent after the first wave, want the few calls after the resume (the %d queued ones were sent too?)", sent, queued)
	}
}

// BenchmarkRedisPipeline measures what a Take through a Pipeliner costs
// this process (cpu-µs/op: its user and system CPU time per Take; the
// redis-server, another process, is not counted) with 1, 8, 32 and 128 Takes
// in flight, through go-redis's pipelines (goredis) and on the Pipeliner's
// own connection (direct). Run it with -cpu 1 to compare with one core per
// side, as Caddy and Redis in bench/e2e.sh:
//
//	go test -run '^$' -bench RedisPipeline -benchmem -cpu 1 ./redisstore/
func BenchmarkRedisPipeline(b *testing.B) {
	srv := redistest.Start(b)
	for _, kind := range []struct {
		name string
		new  func(redis.UniversalClient, time.Duration) *Pipeliner
	}{{"goredis", NewPipeliner}, {"direct", NewDirectPipeliner}} {
		for _, inFlight := range []int{1, 8, 32, 128} {
			b.Run(fmt.Sprintf("%s/%d", kind.name, inFlight), func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				defer c.Close()
				p := kind.new(c, time.Second)
				defer p.Close()
				s, err := NewStore(c, mustLimiter(b, algorithms.GCRA, oneTier(1<<40, time.Second)), Options{KeyPrefix: "rlbench:", Zone: "p", Pipeliner: p})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if _, err := s.Take(ctx, "k0", time.Time{}, 1); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetParallelism((inFlight + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				var n atomic.Uint64
				before := processCPU(b)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := "k" + strconv.FormatUint(n.Add(1)&1023, 10)
						if _, err := s.Take(ctx, key, time.Time{}, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-before)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// takeAll starts n Takes of key at once; the function it returns waits for
// them and returns their errors.
func takeAll(ctx context.Context, s *Store, key string, n int) func() []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Take(ctx, key, time.Time{}, 1)
		}()
	}
	return func() []error {
		wg.Wait()
		return errs
	}
}
