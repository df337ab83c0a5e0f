package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/breaker"
	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
	"github.com/zonelimit/caddy-ratelimit/internal/storetest"
)

// Concurrent callers with and without a deadline (those never read a
// batch's replies, see runDirect) share the direct connection: every call
// is answered with its own decision, exactly (the limit admits 100 of
// 320), one EVALSHA each.
func TestDirectPipelinerCallersLead(t *testing.T) {
	srv, c, _, s := warmedStore(t, 0, 100, "lead")
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	admitted := takeConcurrently(t, 64, 5, func(g, _ int) (algorithms.Decision, error) {
		if g%2 == 0 {
			return s.Take(context.Background(), "k", time.Time{}, 1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		return s.Take(ctx, "k", time.Time{}, 1)
	})
	if admitted != 100 {
		t.Errorf("admitted %d of 320, want 100", admitted)
	}
	if n := commandStats(t, c)["evalsha"]; n != 320 {
		t.Errorf("%d EVALSHA for 320 Takes", n)
	}
}

// Callers whose deadline passes while their calls queue behind a batch
// that Redis holds (a stopped redis-server) stop waiting; their calls
// still go out, as the next batch, once the batch ahead is answered, and
// the calls after them are answered as usual.
func TestDirectPipelinerCallersLeave(t *testing.T) {
	srv, p, s := pausedStore(t, 100, "leave")
	ctx := context.Background()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	first := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, "k", time.Time{}, 1)
		first <- err
	}()
	waitLead(t, p)
	const leaving = 10
	errs := make(chan error, leaving)
	for range leaving {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := s.Take(ctx, "k", time.Time{}, 1)
			errs <- err
		}()
	}
	for range leaving {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call queued behind the stopped batch: %v, want its deadline", err)
		}
	}
	if n := p.queued(); n != leaving {
		t.Fatalf("%d calls queued, want %d", n, leaving)
	}
	srv.Resume()
	resumed = true
	if err := <-first; err != nil {
		t.Fatalf("the call Redis held: %v", err)
	}
	// The first call, the ten left behind, then this one.
	if d, err := s.Take(ctx, "k", time.Time{}, 1); err != nil || d.Remaining != 100-12 {
		t.Fatalf("after the stop: %+v, %v; want %d remaining", d, err, 100-12)
	}
}

// warmedStore returns a gcra Store of limit events an hour through a direct
// Pipeliner whose client has read timeout readTimeout (0: go-redis's), on a
// redis-server of its own, its script loaded.
func warmedStore(t *testing.T, readTimeout time.Duration, limit int64, zone string) (*redistest.Server, *redis.Client, *Pipeliner, *Store) {
	t.Helper()
	srv := redistest.Start(t)
	c, p := directPipeliner(t, &redis.Options{Addr: srv.Addr, ReadTimeout: readTimeout}, 0)
	s := pipelinedStore(t, c, p, algorithms.GCRA, oneTier(limit, time.Hour), zone)
	if _, err := s.Take(context.Background(), "warm", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	return srv, c, p, s
}

// pausedStore is warmedStore with a read timeout of a minute, on a
// redis-server it then pauses (SIGSTOP): what is sent is not answered
// until it resumes.
func pausedStore(t *testing.T, limit int64, zone string) (*redistest.Server, *Pipeliner, *Store) {
	t.Helper()
	srv, _, p, s := warmedStore(t, time.Minute, limit, zone)
	srv.Pause()
	return srv, p, s
}

// waitLead waits until a call of p's leads: a batch is in flight.
func waitLead(t *testing.T, p *Pipeliner) {
	t.Helper()
	storetest.WaitFor(t, "the first call in flight", func() bool {
		x := p.direct
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.busy
	})
}

// The calls of a batch that a connection's failure fails (here a read
// timeout, Redis stopped), and those queued behind it, fail with one
// error that the breaker counts as one failure: a busy instance's one
// broken connection is not twenty failures in a row. Only the batch's
// call may still run in Redis: those queued behind it were never sent.
func TestDirectPipelinerBatchFailsOnce(t *testing.T) {
	srv, _, p, s := warmedStore(t, 2*time.Second, 100, "once")
	srv.Pause()
	defer srv.Resume()
	const calls = 20
	errs := make(chan error, calls)
	take := func() {
		_, err := s.Take(context.Background(), "k", time.Time{}, 1)
		errs <- err
	}
	go take()
	waitLead(t, p)
	for range calls - 1 {
		go take()
	}
	storetest.WaitFor(t, "the calls queued behind the batch", func() bool { return p.queued() == calls-1 })
	b := breaker.New(breaker.Options{Failures: 5, Probe: func(context.Context) error { return nil }})
	defer b.Close()
	var first *breaker.Shared
	mayRun := 0
	for range calls {
		err := <-errs
		var sh *breaker.Shared
		var ne net.Error
		if !errors.As(err, &sh) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("a call of the failed batch: %v, want a timeout shared by the batch", err)
		}
		if first == nil {
			first = sh
		} else if sh != first {
			t.Errorf("two failures for one batch: %v and %v", first, sh)
		}
		if mayRunLater(err) {
			mayRun++
		}
		b.Record(err)
	}
	if mayRun != 1 {
		t.Errorf("%d of the %d failed calls may still run in Redis, want 1 (the batch's)", mayRun, calls)
	}
	if b.State() != breaker.Closed {
		t.Errorf("breaker %s after one failed batch of %d calls, want closed", b.State(), calls)
	}
}

// panicHook panics in the first pipeline it sees.
type panicHook struct {
	redistest.NopHook
	done atomic.Bool
}

func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.done.CompareAndSwap(false, true) {
			panic("hook")
		}
		return next(ctx, cmds)
	}
}

// A caller that panics while it sends a batch (a go-redis hook, here)
// gives the lead up: the panic reaches it, and the calls after it are
// sent and answered.
func TestDirectPipelinerLeaderPanics(t *testing.T) {
	c, s := newClientStore(t, "panic")
	ctx := context.Background()
	if _, err := s.Take(ctx, "k", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	c.AddHook(&panicHook{})
	func() {
		defer func() {
			if v := recover(); v != "hook" {
				t.Fatalf("recovered %v, want the hook's panic", v)
			}
		}()
		s.Take(ctx, "k", time.Time{}, 1)
	}()
	done := make(chan error, 1)
	go func() {
		d, err := s.Take(ctx, "k", time.Time{}, 1)
		if err == nil && d.Remaining != 8 {
			err = fmt.Errorf("%+v, want 8 remaining", d)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the panic: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a call still waits a minute after the leader panicked")
	}
}

// When a batch fails (the redis-server is gone), every call queued behind
// it fails with it, more than a batch holds (maxPipeline) too: none is
// left queued with no leader, waiting for a call that may never come.
func TestDirectPipelinerFailedBatchFailsAllQueued(t *testing.T) {
	srv, p, s := pausedStore(t, 1000, "failall")
	ctx := context.Background()
	errs := make(chan error, maxPipeline+3)
	take := func() {
		_, err := s.Take(ctx, "k", time.Time{}, 1)
		errs <- err
	}
	go take()
	waitLead(t, p)
	const queued = maxPipeline + 2
	for range queued {
		go take()
	}
	storetest.WaitFor(t, "the calls queued", func() bool { return p.queued() == queued })
	srv.Stop()
	for i := range queued + 1 {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("a call succeeded without a redis-server")
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d calls answered a minute after the batch failed; %d still queued", i, queued+1, p.queued())
		}
	}
}

// A leader that gave the lead up (nothing queued behind its batch) and
// one that keeps it (a call queued behind its batch) both put their batch's
// slice back as spare, each once it has woken its callers. Here each one's
// caller is slow to be woken (an unbuffered done channel), so that the
// first puts its slice back while the second is between its lock and its
// own: under the race detector, the two must not race. The three calls are
// answered in order, each with its own decision.
func TestDirectPipelinerLeadersPutBackSpare(t *testing.T) {
	_, _, p, s := warmedStore(t, 0, 10, "spare")
	call := func(done chan struct{}) *scriptCall {
		return &scriptCall{evalCall: evalCall{script: s.script.run, take: storeCall{s: s, key: "k", cost: 1}}, done: done}
	}
	first, second, queued := call(make(chan struct{})), call(make(chan struct{})), call(make(chan struct{}, 1))
	signaled := func(c *scriptCall) func() bool {
		return func() bool { return c.state.Load() == callSignaled }
	}
	x := p.direct
	lead := func(batch, queue []*scriptCall) chan struct{} {
		x.mu.Lock()
		x.busy, x.batch = true, batch
		x.queue = append(x.queue, queue...)
		x.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.lead(nil)
		}()
		return done
	}

	// The first leader, nothing queued: it gives the lead up, then waits
	// to wake its caller.
	firstDone := lead([]*scriptCall{first}, nil)
	storetest.WaitFor(t, "the first leader waking its caller", signaled(first))
	// The second, a call queued: it keeps the lead, sends the queued
	// call, then waits to wake its caller.
	secondDone := lead([]*scriptCall{second}, []*scriptCall{queued})
	storetest.WaitFor(t, "the second leader waking its caller", signaled(second))
	// Each woken before the other is done: nothing orders what they do
	// next but the lock.
	<-second.done
	<-first.done
	<-firstDone
	<-secondDone
	// The queued call's caller was handed the lead: it reads its reply.
	<-queued.done
	if !queued.lead {
		t.Fatal("the queued call's caller was not handed the lead")
	}
	p.lead(queued)
	for i, c := range []*scriptCall{first, second, queued} {
		r := c.reply
		if want := int64(9 - i); r.err != nil || r.n < 4 || r.vals[0] != 1 || r.vals[3] != want {
			t.Errorf("call %d: %v %v, want admitted with %d remaining", i+1, r.ints(), r.err, want)
		}
	}
}
